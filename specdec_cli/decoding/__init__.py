"""The round and what runs it: the engine (plan, draft, one target batch, verify, roll back,
typed events), token bytes to text, the driver that runs a generation to its end (consume.py)
and the counters a run is folded into (stats.py). Nothing here prints.

Left out: the maths (maths/), who drafts (drafting/), how much (tuning/), llama.cpp (llama/).
"""
