"""Built-in skills. Each .hy file beside this one is loaded by passepartout.skills."""
