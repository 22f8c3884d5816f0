"""Shared fixtures. Real-model tests carry the `model` marker and use the built-in pair.

Every `model` test is also `slow`, like the statistical loops of 20k-100k draws that carry
the marker themselves: `pytest -m "not slow"` is the quick loop, `pytest` runs everything.
Only one llama.cpp process may run at a time (its threads spin-wait), so the suite never
runs in parallel.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# A suite started in the background by a shell without job control (`pytest &` in a script)
# inherits SIGINT ignored, and so would every process it starts: the Ctrl-C tests would send a
# Ctrl-C that nothing sees, fail, and leave their child decoding beside the rest of the suite.
# Handled here, exec'd children start with the default again, as under a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# `-k auto` keeps what each `specdec run` learnt of a pair (tuning/record.py): off for the suite, so
# that no test starts from what an earlier one left; the tests of the record turn it on themselves.
os.environ["SPECDEC_NO_TUNING_CACHE"] = "1"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("model") is not None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def builtin_paths(tmp_path_factory) -> tuple[Path, Path]:
    """(draft, target) of the built-in pair; the F32 target is converted once per cache."""
    os.environ.setdefault("SPECDEC_CACHE", str(Path.home() / ".cache" / "specdec"))
    from specdec_cli.models.cache import builtin_pair

    return builtin_pair()


@pytest.fixture(scope="session")
def builtin_models(builtin_paths):
    """Both built-in models loaded once for the session: (draft, target) LlamaModel."""
    from specdec_cli.llama.model import LlamaModel

    draft_path, target_path = builtin_paths
    draft = LlamaModel(draft_path, n_ctx=2048)
    target = LlamaModel(target_path, n_ctx=2048)
    yield draft, target
    draft.close()
    target.close()


@pytest.fixture
def hf_cache(monkeypatch, tmp_path) -> Path:
    """An empty huggingface-hub cache; HF_HUB_OFFLINE on, so a miss can never reach the network."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    # huggingface-hub reads HF_HUB_CACHE / HF_HUB_OFFLINE once, at import: set what it read.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache
