"""The model catalogue and its files: models.toml (registry.py) and Hugging Face downloads (download.py).

Part of the core: backend.py, resources.py and session.py may use it; it imports no front-end.
"""
