;; Tests of passepartout/settings.hy: the configuration's schema and the reference it prints.

(import pathlib [Path])

(defn test-the-readme-documents-the-schema []
  (import passepartout.settings [config-reference])
  (setv readme (.read-text (/ (. (Path __file__) parent parent) "README.md") :encoding "utf-8"))
  (assert (in (config-reference) readme)
          "README.md's configuration reference differs from (config-reference); print it again"))
