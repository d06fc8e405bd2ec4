"""The shell gate: a command line read as bash reads it (parse, walk), the rules and
the paths it is judged by, and the judge."""
