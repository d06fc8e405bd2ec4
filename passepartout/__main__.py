"""python -m passepartout: the same as the passepartout command."""
from passepartout.tools.cli import main

main()
