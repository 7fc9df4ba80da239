"""`python -m wheelhouse` runs wh."""

from .cli import main

main()
