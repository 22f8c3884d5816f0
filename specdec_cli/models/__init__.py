"""Where model files come from: named pairs (catalogue.py), what the user named (registry.py),
the built-in pair's conversion cache (cache.py) and Hugging Face downloads (download.py).

Part of the core: llama/ and session.py may use it; it imports no front-end.
"""
