"""The child process `specdec doctor` starts: load one GGUF, decode a few tokens, print one JSON line.

    python -m specdec_cli.doctor.probe model.gguf --no-repack --tokens 4
    {"ok": true, "desc": "llama 134M Q4_1", "repack": false, "offloaded": 0, "layers": 31, "tokens": 4, "text": " I'm", "seconds": 0.41}

Every layer goes to the GPU when llama.cpp has one (as in `run`): "offloaded" says how many did.

It runs alone in its own process so that a native crash (llama.cpp #20824 segfaults on
some AMX machines) kills only the probe: the doctor reads the signal from the exit status.
A failure specdec can explain prints {"ok": false, "error": "..."} and exits 1.

Left out: judging the result (doctor/findings.py), and sampling: the probe decodes greedily.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def probe(path: str, repack: bool, tokens: int, rpc: tuple[str, ...] = ()) -> dict:
    import numpy as np

    from ..llama.model import LlamaModel

    start = time.perf_counter()
    with LlamaModel(path, n_ctx=256, repack=repack, role="model", rpc_servers=rpc) as model:
        ids = model.tokenize("The sea is", add_special=True)
        logits = model.decode(ids)
        out = []
        for _ in range(tokens):
            out.append(int(np.argmax(logits[-1])))
            logits = model.decode(out[-1:])
        return {
            "ok": True,
            "desc": model.describe(),
            "repack": model.repack,
            "rpc": list(rpc),
            "offloaded": model.offloaded_layers,
            "layers": model.n_layer + 1,
            "tokens": len(out),
            "text": model.detokenize(out),
            "seconds": round(time.perf_counter() - start, 3),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_cli.doctor.probe")
    parser.add_argument("path")
    parser.add_argument("--repack", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--rpc", default="", help="HOST:PORT[,...]: load through these RPC servers")
    args = parser.parse_args(argv)
    from ..errors import SpecdecError

    try:
        result = probe(args.path, args.repack, args.tokens, tuple(filter(None, args.rpc.split(","))))
    except SpecdecError as exc:
        result = {"ok": False, "error": str(exc)}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
