"""`python -m wheelhouse.cli` runs wh (used by tests and by boxes without the console script)."""

from . import main

main()
