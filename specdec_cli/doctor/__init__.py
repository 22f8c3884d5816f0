"""`specdec doctor`, a front-end: what the llama.cpp build can do, and each model probed in a child.

findings.py gathers the report; probe.py is the child process (`python -m specdec_cli.doctor.probe`).
It uses the core only; cli/doctor.py gives it a command.
"""
