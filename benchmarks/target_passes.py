"""The target's plain passes alone: N sequences, one row each, as a server's plain batched step makes them.

    flock /tmp/llama.lock python3 benchmarks/target_passes.py
    flock /tmp/llama.lock python3 benchmarks/target_passes.py --target big.gguf --sequences 1 4 --repeats 3
    flock /tmp/llama.lock python3 benchmarks/target_passes.py --sequences 1 --rows 1 2 3 5 9 17   # verify passes

Each sequence is prefilled with --prompt tokens, then --steps passes each add --rows tokens to
every sequence, each with its logits (one llama_decode through LlamaModel.decode_rows, as
decoding/batch.py issues them; R rows are a round's last token and R - 1 drafts to verify);
reported: tokens per second (the rows the passes held) and milliseconds per pass. With one row
this is the ceiling of a server whose every pass is plain: what `specdec serve --drafter none`
and llama-server without a draft serve at N clients falls short of it by their own time around
the passes (docs/serving.md compares the three, as llama.cpp's llama-batched-bench measures its
"TG" phase).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

from specdec_cli.llama.model import LlamaModel  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="GGUF (default: the built-in pair's target)")
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, nargs="+", default=[1], help="rows per sequence in each pass (each way in turn)")
    args = parser.parse_args()
    target = args.target or builtin_pair()[1]
    most = max(args.sequences)
    n_ctx = args.prompt + args.steps * max(args.rows) + 64
    with LlamaModel(target, n_ctx=n_ctx, n_threads=args.threads, role="target", n_seq=most) as model:
        for repeat in range(args.repeats):
            for n in args.sequences:
                for r in args.rows:
                    for seq in range(most):
                        model.seq_rm(seq, 0)
                    for seq in range(n):
                        model.decode_rows([(seq, 0, list(range(100, 100 + args.prompt)), 1)])
                    start = time.perf_counter()
                    for step in range(args.steps):
                        first = args.prompt + step * r
                        model.decode_rows([(seq, first, list(range(300 + first, 300 + first + r)), r) for seq in range(n)])
                    seconds = time.perf_counter() - start
                    print(f"repeat {repeat} sequences {n} rows {r}: {n * r * args.steps / seconds:7.1f} tokens/s, {seconds / args.steps * 1e3:5.1f} ms per pass", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
