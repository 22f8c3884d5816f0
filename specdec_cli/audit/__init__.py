"""`specdec audit`, a front-end: the check that the target's output distribution is unchanged.

run.py draws the generations and runs the tests, gof.py holds the goodness-of-fit maths
(pooled chi-square with a simulated p-value, total variation), render.py the report. It uses
the core only; cli/audit.py gives it a command.
"""
