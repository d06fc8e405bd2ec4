"""python -m passepartout: the same as the passepartout command."""
from passepartout.cli import main

main()
