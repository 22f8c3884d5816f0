"""The `specdec` command line, a front-end: app.py is the Typer app and its error edge, one
module per command (run.py, bench.py, audit.py, doctor.py, models.py, serve.py, and simulate.py
for `specdec simulate`'s animation), options.py the flags they share, render.py all text on screen.

The one front-end that imports others: each command gives a front-end (bench, audit, doctor,
serve) its flags; none of them imports cli. `python -m specdec_cli.cli` runs the app.
"""
