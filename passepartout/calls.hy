;; * Why

"Whatever syntax a model wrote its call in, once read it is a name and
arguments, under whichever keys its template used. This module turns that into
the action plist the gates judge: the name written as actions are, the few
argument aliases renamed, a JSON value or a plist taken as a proposal only when
it is shaped as one. The readers of each family (families.org) and of prose
(extract.org) all end here."

(import re
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-put proto-has proto-without
                            proto-normalize proto-from-data is-plist]
        passepartout.lenient [loads-lenient])

(setv _ACTION  ':action
      _PAYLOAD ':payload)

;; * Normalising what was read

(setv _NAME-KEYS #("name" "tool" "tool_name" "function" "recipient_name")
      _ARGS-KEYS #("arguments" "parameters" "args" "input" "tool_input" "action_input" "params")
      _ALIASES {"shell" {"command" "cmd"}
                "message" {"message" "text" "content" "text" "response" "text"}})

(defn action-name [name]
  "The action NAME (a call's name as a model wrote it) stands for, or ProtoError."
  (when (not (isinstance name str))
    (raise (ProtoError f"tool name {name !r} is not a name")))
  (setv n (.strip name))
  (for [prefix #("functions." "default_api." "tools." "tool." "api.")]
    (when (.startswith n prefix) (setv n (cut n (len prefix) None))))
  (when (not (re.fullmatch r"[A-Za-z][A-Za-z0-9_-]*" n))
    (raise (ProtoError f"tool name {name !r} is not a name")))
  (.replace (.lower n) "_" "-"))

(defn _aliased [action]
  "The action plist ACTION with its action's argument aliases renamed."
  (setv name (proto-get action _ACTION)
        table (.get _ALIASES (if (isinstance name Keyword) name.name "") {}))
  (for [[alias field] (.items table)]
    (when (and (proto-has action (kw alias)) (not (proto-has action (kw field))))
      (setv action (proto-put (proto-without action [(kw alias)]) (kw field)
                              (proto-get action (kw alias))))))
  action)

(defn _args-dict [arguments]
  (when (isinstance arguments str)
    (setv arguments (if (.strip arguments) (loads-lenient arguments) {})))
  (when (is arguments None) (setv arguments {}))
  (when (not (isinstance arguments dict))
    (raise (ProtoError "tool-call arguments must be an object")))
  (_given arguments))

(defn _given [d]
  "The dict D without the keys whose value is null: an argument not given."
  (dfor [k v] (.items d) :if (is-not v None) k v))

(defn call-action [name arguments]
  "The action plist of a call NAME with ARGUMENTS (a dict, or JSON text)."
  (setv action (action-name name)
        fields (proto-normalize (proto-from-data (_args-dict arguments))))
  (_aliased (+ [:action (kw action)] (proto-without fields [_ACTION]))))

(defn _name-and-args [data]
  "#(name arguments) when the dict DATA is shaped as a call, else None."
  (setv name-key (next (gfor k _NAME-KEYS :if (isinstance (.get data k) str) k) None)
        args-key (next (gfor k _ARGS-KEYS :if (in k data) k) None))
  (when (and name-key (or args-key (= (len data) 1)))
    #((get data name-key) (if args-key (get data args-key) {}))))

(defn object-proposals [data]
  "The proposal plists in the decoded JSON value DATA, or None when it is not
   shaped as one (a JSON object that is not an action is data, not a proposal)."
  (cond
    (isinstance data list)
    (do (setv each (lfor d data (object-proposals d)))
        (when (and each (all (gfor e each e)))
          (sum each [])))
    (not (isinstance data dict)) None
    (and (isinstance (.get data "tool_calls") list) (.get data "tool_calls"))
    (object-proposals (get data "tool_calls"))
    (isinstance (.get data "function") dict)
    (do (setv f (get data "function")
              pair (_name-and-args f))
        (when pair [(call-action #* pair)]))
    (in "action" data)
    (do (setv action (get data "action"))
        (cond
          (isinstance action dict) (object-proposals action)
          (not (isinstance action str)) None
          True
          (do (setv inner (next (gfor k _ARGS-KEYS :if (isinstance (.get data k) dict) k) None)
                    fields (if inner
                               (| (dfor [k v] (.items data) :if (!= k inner) k v) (get data inner))
                               data))
              [(_aliased (proto-normalize (proto-from-data (| (_given fields) {"action" (action-name action)}))))])))
    (and (= (.get data "type") "request") (isinstance (.get data "payload") dict))
    (do (setv inner (object-proposals (get data "payload")))
        (when inner
          (setv envelope (proto-normalize (proto-from-data (dfor [k v] (.items data)
                                                                 :if (!= k "payload") k v))))
          [(proto-put envelope _PAYLOAD (get inner 0))]))
    True
    (do (setv pair (_name-and-args data))
        (when pair [(call-action #* pair)]))))

(defn plist-proposal [value]
  "The proposal plist VALUE (a plist just read) stands for, or None when it is not one."
  (when (not (is-plist value))
    (return None))
  (setv p (proto-normalize value)
        inner (proto-get p _PAYLOAD))
  (defn fix [action]
    (setv name (proto-get action _ACTION))
    (when (isinstance name str)
      (setv action (proto-put action _ACTION (kw (action-name name)))))
    (if (isinstance (proto-get action _ACTION) Keyword) (_aliased action) None))
  (cond
    (proto-has p _ACTION) (fix p)
    (and (is-plist inner) (proto-has inner _ACTION))
    (do (setv a (fix inner))
        (when a (proto-put p _PAYLOAD a)))
    True None))
