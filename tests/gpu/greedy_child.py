"""A child process for tests/gpu: a model's greedy target-only tokens, with the llama.cpp of the
interpreter that runs it (the CPU-only build, to compare a GPU's output with).

    python greedy_child.py target.gguf '[1, 2, 3]' 48
    {"gpu_offload": false, "tokens": [...]}
"""

from __future__ import annotations

import json
import sys

import specdec_cli.backend as backend  # first: llama.cpp before numpy (specdec_cli/__init__.py)
from specdec_cli.engine import Engine, GenerationConfig
from specdec_cli.sampling import GREEDY
from specdec_cli.stats import consume


def main(path: str, prompt: str, n: str) -> None:
    with backend.LlamaModel(path, n_ctx=1024) as target:
        engine = Engine(target)
        tokens = consume(engine.generate(json.loads(prompt), GenerationConfig(max_tokens=int(n), sampling=GREEDY))).tokens
    print(json.dumps({"gpu_offload": backend.gpu_offload_supported(), "tokens": tokens}))


if __name__ == "__main__":
    main(*sys.argv[1:])
