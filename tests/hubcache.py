"""huggingface-hub's cache layout, written by hand for tests that must not touch a network.

    snapshot = put_in_cache(cache, "me/tiny-GGUF", {"tiny-Q8_0.gguf": b"GGUF"})
    # cache/models--me--tiny-GGUF/{blobs/cccccccc0000, snapshots/ccc…/tiny-Q8_0.gguf -> blob, refs/main}
"""

from __future__ import annotations

import os
from pathlib import Path


def put_in_cache(cache: Path, repo: str, files: dict[str, bytes], commit: str = "c" * 40, ref: str | None = None) -> Path:
    """Blobs, a snapshot of links to them, and refs/main holding `ref` (default: the commit)."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for i, (name, data) in enumerate(files.items()):
        blob = root / "blobs" / f"{commit[:8]}{i:04d}"
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(ref if ref is not None else commit)
    return snapshot
