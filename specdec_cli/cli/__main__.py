"""`python -m specdec_cli.cli ARGS`: the `specdec` script."""

from .app import main

main()
