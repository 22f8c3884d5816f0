"""`specdec bench`, a front-end: the honest A/B of speculative against target-only decoding.

run.py plans and runs the sweep, model.py holds its data model and defaults, stats.py its
statistics, output.py its CSV/JSON files, render.py its screen and plot, native.py llama.cpp's
own llama-speculative-simple for comparison. It uses the core only; cli/bench.py gives it a command.
"""
