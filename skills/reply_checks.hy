;; * Why

"A model's answer is checked against what its task actually ran before the
person reads it. Reply validators, which skills bring, look for claims with no
action behind them; this module runs them and decides whether the answer goes
out, goes back to the model for one correction, or is withheld."

;; * The built-in checks

;; * reply-checks: the built-in reply validators

(require passepartout.macros [defskill])
(import re
        functools [lru-cache]
        passepartout.proto [proto-get])

;; ** The patterns, per language

(setv PATTERNS
  {"en"
   {"negation" r"\b(not|no|never|cannot|unable|without|nothing|neither|nor)\b|n't\b|\bno longer\b"
    "earlier" r"\b(yesterday|earlier|previously|last (time|session|task|conversation)|(?<!from )(?<!of )last (week|month|night)|the other day|(\d+|a few|several|two|three|a) (days?|weeks?|months?|years?) ago|in (our|the|your) (previous|last|earlier) \w+|this morning|before you asked)\b"
    "conditional" r"\b(if|unless|once|whenever)\b"
    "asks" r"\b(tell me|send me|show me|let me know|paste (it|the)|as soon as you|when you)\b|\b(please|can you|could you) (confirm|send|tell|share|paste|give)\b"
    "supposing" r"\b(would|could|might|example|for instance|e\.g\.|such as|typically|usually|normally|imagine|suppose|hypothetically)\b"
    "from-person" r"\byou (just )?(sent|pasted|shared|uploaded|gave|posted|provided|quoted|attached|forwarded|wrote)\b|\byour (message|paste|snippet|attachment)\b"
    "claims"
    {"run" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (ran|run|executed|installed|launched|restarted|started|stopped|killed|deployed|compiled|downloaded|committed|pushed|configured|set up)\b|\b(is|are) now running\b|\brunning in the background\b|\bhas been (started|launched|installed|deployed|restarted)\b"
     "write" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (created|updated|edited|modified|deleted|removed|renamed|moved|copied|overwrote|overwritten|fixed|changed|replaced|put|placed|cleaned( up)?|tidied( up)?|archived|backed up|generated|exported|imported|converted|merged|applied|uploaded|published|shared|organi[sz]ed)\b|\b(i|we)('ve| have)?( just| now| already| also)? (wrote|written|drafted)\b[^?!\n]{0,40}\b(to|into|in|as)\b|\b(file|folder|directory|document|script|config|note|page)\b[^?!\n]{0,40}\b(has been|have been|was|were|is now) (created|written|updated|edited|modified|deleted|removed|renamed|moved|copied|changed)\b"
     "store" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (saved|stored|added|appended|recorded)\b|\b(has been|have been|was|were|is now) (saved|stored|added|appended|recorded)\b"
     "remember" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (remembered|memorised|memorized|noted)\b|\b(i('ve| have)|i) made a note\b|\bi('ll| will)( now)? remember (that|this|it)\b|\bis now in (my|your) memory\b"
     "send" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (sent|emailed|mailed|forwarded|posted|messaged|texted|notified)\b|\b(has been|have been|was|were) (sent|emailed|forwarded|posted|delivered)\b"
     "schedule" r"\b(i|we)('ve| have)?( just| now| already| successfully| also)? (scheduled|booked|set (a|an|up a|the|your) (reminder|timer|alarm|meeting|appointment))\b|\b(has been|have been|was|is now) (scheduled|booked)\b|\b(reminder|timer|alarm|appointment|meeting) (is|has been|was) (now )?(set|booked|scheduled|created)\b"
     "any" r"\b(i|we)('ve| have)( just| now| already| successfully| also)? (?!(understood|noticed|thought|wanted|asked|mentioned|said|explained|described|summari[sz]ed|answered|replied|tried|hoped|meant|learned|learnt|seen|heard|told|been|had|got|gotten|used|found|included|listed|outlined|suggested|recommended|kept|left|given|shown|written|drafted|prepared|translated|rephrased|corrected|missed|forgotten|received|read)\b)\w+(ed|en|wn|un|ut|ade|ept|ent|one|ilt|ot)\b|\b(has|have) been( successfully)? (?!(refused|rejected|blocked|denied|prevented|cancell?ed|declined)\b)\w+(ed|en)\b(?! (by you|before|yesterday))|\b(i|we)( just| now| already| successfully| also| then| quickly| finally)? (?!(noticed|wanted|asked|mentioned|explained|described|summari[sz]ed|answered|replied|tried|hoped|learned|assumed|guessed|expected|preferred|liked|loved|enjoyed|needed|considered|wondered|worried|figured|reali[sz]ed|decided|agreed|offered|promised|wished|imagined|believed|used|included|listed|outlined|suggested|recommended|received|missed|quoted|cited|referenced|stated|intended|planned|focused|compared|estimated|calculated|counted|interpreted|translated|rephrased|corrected|misread|confused|mixed)\b)(\w{2,}ed|made|put|set|wrote|sent|ran|built|took|cut|threw|shut|brought|began|dug|hung|laid|lit|rebuilt|rewrote|undid|redid|split|swept|froze|drew|broke|tore|sold|bought|paid|spun|wound|bound|overrode|overwrote|withdrew|spread|struck|slid|sank) (the|a|an|your|my|our|its|it|them|this|that|these|those|all|every|each|both|some|\d\S*|\S+[./]\S+)\b"
     "observe" r"\b(i|we)('ve| have)?( just| now| already| also)? (checked|looked (at|up|into|through)|searched|listed|inspected|verified|tested|scanned|examined|grepped|reviewed)\b|\b(i|we)('ve| have| just)( just| now| already| also)? read\b"}
    "results" r"^(the )?(output|result|results|stdout|stderr)( of [^:\n]{1,40})?\s*(:|$)|\bhere's what('s| is) (inside|in)\b|\b(has|have|contains|shows|lists|returned|returns) \d+ (rows|lines|columns|files|entries|pages|items|matches|results|words|records|notes|errors|warnings)\b|\bline \d+ (reads|says|is|contains)\b|`[^`\n]+` (shows|showed|returns|returned|prints|printed|gives|gave|outputs|lists|says)\b|\b(your |the |this )?(file|log|config|document|script)\w* (has|contains|shows|lists) \d+\b|\b(the )?(first|last|second|third) (line|entry|row) (of|in) (the|your|that)\b|\b(it|the file|the log|the config)( currently| now)? (says|reads|shows)\s*(:|$)|\bhere('s| is| are)( the| your)? (contents?|output|listing|results?|list of (files|entries|matches)|files|lines|log|entries|matches|search results)\b|\bthe (file|document|config|log|script|readme)\b[^\n]{0,40}\b(contains|reads|says|looks like)\b|\b(the )?(command|script|output|query|search|grep)\b[^\n]{0,30}\b(returned|printed|shows|showed|produced|gave|found|output|lists|listed)\b|\b(the )?(directory|folder|workspace)\b[^\n]{0,30}\b(contains|has|holds)\b|\b(i )?found \d+\b|\bthere are \d+ (files|matches|results|entries|lines|notes)\b|(^|\s)[-d]rw[-x]|\bexit (code|status) \d+"
    "promises" r"\b(i'll|i will|i am going to|i'm going to|let me|allow me to|i'm now|i am now|i'm about to)( now| quickly| just| first| go ahead and| start to| be)? (check|look|run|create|write|search|find|fetch|read|open|get|install|send|save|update|fix|start|schedule|remind|investigate|verify|test|do|take care|handle|prepare|draft|gather|pull|analy[sz]e|review|try|figure|dig|see|set up|go through|go ahead|grab|compile|checking|looking|running|creating|writing|searching|fetching|reading|working)\b|\b(one|just a) (moment|second|sec|minute)\b|\bgive me a (moment|second|minute)\b|\bhang on\b|\bstand by\b|\bworking on it\b|\bon it\b"
    "completion" r"\b(all done|done and dusted|(the |this |your )?task (is )?(now )?(complete|completed|done|finished)|(everything|that|it|this) (is|has been) (now )?(done|complete|completed|finished|fixed|taken care of)|i('ve| have) (finished|completed|done) (it|that|this|the task|everything)|successfully completed|it works now)\b"}
   "de"
   {"negation" r"\b(nicht|nie|niemals|kein|keine|keinen|keinem|keiner|keines|ohne|nichts|weder)\b"
    "earlier" r"\b(gestern|vorgestern|vorhin|früher|zuvor|vorher|neulich|letzte[nsr]? (mal|sitzung|aufgabe|unterhaltung)|(?<!der )(?<!von )letzte[nsmr]? (woche|monat)|heute morgen|vor (einer|einem|zwei|drei|ein paar|einigen|\d+) (tag|tagen|woche|wochen|monat|monaten))\b"
    "conditional" r"\b(wenn|falls|sobald|sofern)\b"
    "asks" r"\b(sag mir|sagen sie mir|schick mir|schicken sie mir|zeig mir|gib mir bescheid|geben sie mir bescheid|bitte (bestätige|schicke|sende|nenne))\b"
    "supposing" r"\b(würde|würden|könnte|könnten|beispiel|beispielsweise|etwa so|typischerweise|normalerweise|angenommen|z\.b\.|vielleicht)\b"
    "from-person" r"\b(du|sie) (mir )?(geschickt|gesendet|eingefügt|geteilt|gegeben|hochgeladen|angehängt|geschrieben)\b|\b(deine[rmn]?|ihre[rmn]?) (nachricht|datei|anhang|ausschnitt)\b|\b(du|sie) (hast|haben) (mir )?[^\n]{0,30}(geschickt|gesendet|eingefügt|geteilt|hochgeladen)\b"
    "claims"
    {"run" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(ausgeführt|gestartet|angestoßen|angeworfen|installiert|neu gestartet|gestoppt|beendet|heruntergeladen|eingerichtet|konfiguriert|kompiliert|committet|gepusht|deployt)\b|\b(läuft|laufen) (jetzt|nun)( im hintergrund)?|\bim hintergrund gestartet\b|\b(wurde|wurden|ist jetzt|ist nun)\b[^?!\n]{0,50}\b(gestartet|installiert|ausgeführt|eingerichtet)\b"
     "write" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(erstellt|angelegt|geschrieben|aktualisiert|geändert|bearbeitet|gelöscht|entfernt|umbenannt|verschoben|kopiert|überschrieben|korrigiert|ersetzt|ergänzt|aufgeräumt|bereinigt|archiviert|erzeugt|generiert|exportiert|importiert|konvertiert|zusammengeführt|hochgeladen|veröffentlicht|abgelegt)\b|\b(liegt|liegen|steht|stehen) (jetzt|nun) (unter|in|im)\b|\b(wurde|wurden|ist jetzt|ist nun)\b[^?!\n]{0,50}\b(erstellt|angelegt|geschrieben|aktualisiert|geändert|gelöscht|entfernt|umbenannt|verschoben|kopiert)\b"
     "store" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(gespeichert|abgelegt|hinzugefügt|angehängt|eingetragen)\b|\b(wurde|wurden|ist jetzt|ist nun)\b[^?!\n]{0,50}\b(gespeichert|abgelegt|hinzugefügt|eingetragen)\b"
     "remember" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(gemerkt|notiert|vermerkt)\b|\b(ist|steht) (jetzt|nun) in (meinem|deinem) gedächtnis\b|\bich (merke|notiere) mir\b"
     "send" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(gesendet|geschickt|verschickt|weitergeleitet|gemailt|gepostet|benachrichtigt)\b|\b(wurde|wurden)\b[^?!\n]{0,50}\b(gesendet|verschickt|weitergeleitet|zugestellt)\b"
     "schedule" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(eingeplant|geplant|gebucht|terminiert|erinnerung gestellt|erinnerung eingerichtet)\b|\b(wurde|wurden|ist jetzt)\b[^?!\n]{0,50}\b(eingeplant|geplant|gebucht|terminiert)\b"
     "any" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(?!(verstanden|gesagt|gedacht|gemeint|gefragt|gehört|gesehen|erklärt|beschrieben|zusammengefasst|geantwortet|versucht|gehofft|gelernt|erzählt|gehabt|bekommen|erhalten|gefunden|vorgeschlagen|empfohlen|übersetzt|vergessen|verpasst|gelesen|gewusst|geschrieben|formuliert|bemerkt|erwartet|entschieden|erwähnt|beantwortet|vermutet|befürchtet|überlegt|berücksichtigt|verwechselt|übersehen|erfahren|erkannt|beachtet|bedacht|beschlossen|begriffen|behalten|empfunden|erinnert|entschuldigt|bedauert|versprochen|vermisst|verlernt|verschlafen)\b)(ge\w{3,}(t|en)|\w+(ge\w{3,}(t|en))|\w{3,}iert|\w*(be|emp|ent|er|miss|ver|zer|über|hinter|wider)\w{3,}(t|en))\b(?=\s*[.!,]?\s*$)|\b(wurde|wurden)\b[^?!\n]{0,50}\b(?!(abgelehnt|verweigert|blockiert|verhindert|untersagt|abgebrochen)\b)(ge\w{3,}(t|en)|\w+ge\w{3,}(t|en)|\w{3,}iert)\s*[.!]?\s*$"
     "observe" r"\b((ich|wir) (habe|haben|hab)|(habe|haben|hab) (ich|wir))\b[^?!\n]{0,60}\b(nachgesehen|nachgeschaut|geprüft|überprüft|durchsucht|gesucht|gelesen|aufgelistet|getestet|kontrolliert|angesehen|angeschaut)\b"}
    "results" r"^(die |das )?(ausgabe|ergebnis|ergebnisse)( von [^:\n]{1,40})?\s*(:|$)|\b(hat|haben|enthält|enthalten|zeigt|listet|lieferte|liefert) \d+ (zeilen|spalten|dateien|einträge|seiten|treffer|ergebnisse|wörter|datensätze|notizen|fehler|warnungen)\b|\bzeile \d+ (lautet|sagt|ist|enthält)\b|`[^`\n]+` (zeigt|zeigte|liefert|lieferte|gibt|gab|listet)\b|\b\w*(datei|log|konfiguration)\w* (hat|enthält|zeigt|listet) (\d+|zwei|drei|vier|fünf|mehrere)\b|\b(die )?(erste|letzte|zweite) zeile (der|des|deiner|von)\b|\b(sie|es|die datei)( steht)? (lautet|zeigt)\s*(:|$)|\bhier (ist|sind) (der |die |das |deine |ihre )?(inhalt|ausgabe|liste|ergebnis|ergebnisse|dateien|einträge|zeilen|treffer|suchergebnisse)\b|\b(die )?datei\b[^\n]{0,40}\b(enthält|lautet|sagt|sieht so aus)\b|\b(der befehl|die ausgabe|die suche|das skript|die abfrage)\b[^\n]{0,30}\b(lieferte|liefert|ergab|ergibt|zeigt|zeigte|gab|gibt|fand|listet)\b|\b(das verzeichnis|der ordner|der arbeitsbereich)\b[^\n]{0,30}\b(enthält)\b|\b\d+ (treffer|dateien|ergebnisse|einträge|zeilen|notizen)\b[^?!\n]{0,50}\bgefunden\b|\bes gibt \d+ (dateien|treffer|ergebnisse|einträge)\b|\b(der )?inhalt (der|des) [^\n]{0,30}(lautet|ist)\b"
    "promises" r"\b(ich werde|ich schaue|ich schau|ich sehe (mal )?nach|ich prüfe|ich überprüfe|ich kümmere mich|lass mich|lassen sie mich|ich mache mich|ich starte|ich suche|ich lese|ich erstelle|ich schreibe|ich richte|ich sehe mir|ich hole|ich frage|ich führe|ich speichere|ich lege)\b|\b(einen|einen kleinen) (moment|augenblick)\b|\bbin dran\b|\bgleich erledigt\b|\bich melde mich (gleich|sofort|kurz|gleich wieder)\b"
    "completion" r"\b(alles erledigt|erledigt|fertig|abgeschlossen|(die )?aufgabe ist (jetzt )?(erledigt|abgeschlossen|fertig)|alles (ist )?(fertig|erledigt)|es funktioniert jetzt)\b"}})

;; ** Which actions count for which deed

(setv DEEDS {"run" #{"shell"}
             "write" #{"write-file" "shell"}
             "store" #{"write-file" "shell" "memory-add"}
             "remember" #{"memory-add"}
             "send" #{}
             "schedule" #{}
             "observe" #{"read-file" "shell" "memory-search"}
             "any" #{"read-file" "shell" "memory-search" "write-file" "memory-add"}}
      READERS #{"read-file" "shell" "memory-search"}
      KNOWN #{"message" "shell" "write-file" "read-file" "memory-add" "memory-search"})

(defn _compile [pattern]
  (re.compile pattern (| re.IGNORECASE re.MULTILINE)))

(setv _compiled
      (lfor lang (.values PATTERNS)
            (dfor [k v] (.items lang)
                  k (if (isinstance v dict)
                        (dfor [deed p] (.items v) deed (_compile p))
                        (_compile v)))))

;; ** Reading an answer

(setv _sentence-end (re.compile r"(?<=[.!?])\s+|\n+")
      _clause-end (re.compile r"[,;:]\s|\s(?:and|but|so|und|aber|sondern|doch)\s|\s[-–—]\s" re.IGNORECASE))

(defn _sentences [text]
  "The sentences of TEXT with their ends; quoted blocks are one sentence."
  (lfor s (.split _sentence-end (.replace (.strip text) "’" "'")) :if (.strip s) (.strip s)))

(defn _set-aside [sentence guards]
  "True when any pattern under GUARDS, in any language, is found in SENTENCE."
  (any (gfor lang _compiled
             g guards
             (.search (get lang g) sentence))))

(defn [(lru-cache :maxsize 16)] _clauses [text guards [questions True]]
  "The clauses of TEXT that make a statement: not in a sentence that GUARDS (a
   tuple) set aside (nor in a question unless QUESTIONS), and neither denied nor
   supposed themselves. Two checks read an answer alike, so it is split once."
  (tuple (gfor s (_sentences text)
               :if (not (or (and (not questions) (.endswith s "?")) (_set-aside s guards)))
               c (.split _clause-end s)
               :if (and (.strip c) (not (_set-aside c ["negation" "supposing"])))
               (.strip c))))

(defn _matching [sentence key]
  "The first match of the patterns under KEY in SENTENCE, in any language."
  (for [lang _compiled]
    (setv m (.search (get lang key) sentence))
    (when m (return m)))
  None)

(defn _quote [sentence]
  (if (> (len sentence) 90) (+ (cut sentence 87) "…") sentence))

(defn _ran [ctx]
  "The names of the actions the task ran, its answers (:message) left out."
  (lfor pair (or (proto-get ctx ':executed) []) :if (!= (str (get pair 0)) "message") (str (get pair 0))))

;; ** The checks

(defn hallucinated-action [text ctx]
  "What TEXT claims was done with no action of that kind run in the task, or None."
  (setv ran (_ran ctx))
  (when (any (gfor n ran (not (in n KNOWN))))
    (return None))
  (for [s (_clauses text #("earlier" "conditional" "from-person"))]
    (for [lang _compiled
          [deed p] (.items (get lang "claims"))]
      (when (and (.search p s) (not (& (get DEEDS deed) (set ran))))
        (return f"you wrote \"{(_quote s)}\" but no action that could have done it ran in this task"))))
  None)

(defn phantom-result [text ctx]
  "What TEXT presents as output just obtained with nothing run that reads, or None."
  (setv ran (_ran ctx))
  (when (any (gfor n ran (or (in n READERS) (not (in n KNOWN)))))
    (return None))
  (for [s (_clauses text #("earlier" "conditional" "from-person"))]
    (when (_matching s "results")
      (return f"you presented \"{(_quote s)}\" as a result, but nothing that reads files, runs commands or searches ran in this task")))
  None)

(defn empty-promise [text ctx]
  "The promise to act that TEXT ends on with no action run, or None."
  (setv ran (_ran ctx)
        sentences (_sentences text))
  (when (or ran (not sentences)
            (.endswith (.rstrip (get sentences -1) " )\"'") "?")
            (_set-aside (get sentences -1) ["asks"]))
    (return None))
  (for [s (_clauses text #("conditional") :questions False)]
    (when (_matching s "promises")
      (return f"you promised \"{(_quote s)}\" but ended your turn without doing it; an answer is the end of the task"))))

(defn premature-completion [text ctx]
  "The claim in TEXT that the work is done while the task's own record does not show it, or None."
  (setv executed (lfor pair (or (proto-get ctx ':executed) []) :if (!= (get pair 0) "message") pair))
  (when (and executed (= (str (get (get executed -1) 1)) "ok"))
    (return None))
  (for [s (_clauses text #("earlier" "conditional") :questions False)]
    (when (_matching s "completion")
      (return (if executed
                  f"you wrote \"{(_quote s)}\" but the last action of this task failed"
                  f"you wrote \"{(_quote s)}\" but no action of this task shows the work done")))))

(defskill reply-checks
  "Checks the model's answer against what ran in its task before it is sent."
  :priority 40
  :validators {"hallucinated-action" {"check" hallucinated-action}
               "phantom-result" {"check" phantom-result}
               "empty-promise" {"check" empty-promise}
               "premature-completion" {"check" premature-completion "enabled" False}})
