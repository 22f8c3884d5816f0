"""`-k auto` in one-off calls: the first call ever, the second, and after ten, against the best fixed k.

Every measurement is a fresh `specdec run` process, as a shell or a Makefile runs it, on the
built-in pair (or --pair), --max-tokens tokens per prompt at a fixed seed, with the tuning record
(tuning/record.py) in a folder of this script's own (SPECDEC_CACHE), so the user's is untouched:

  - fixed k (each of --ks) and target-only (`--drafter none`), with --no-tuning-cache;
  - auto, first call: each prompt in a folder with no record;
  - auto, second call: each prompt after one call on another prompt;
  - auto, after ten: each prompt after ten calls on the prompts in turn.

A way's speed is its tokens over its generation seconds (prefill and loading excluded, as the
statistics table reports tokens/s), summed over the prompts; the ways are measured in turns,
prompt by prompt, so that the machine's drift falls on all of them alike.

    flock /tmp/llama.lock python3 benchmarks/auto_record.py --temperatures 0 0.8 --out auto_record.json
    flock /tmp/llama.lock python3 benchmarks/auto_record.py --temperatures 0.8 --seeds 1 2 --ks 6 8 12 16 --out auto08.json

With --seeds, every prompt is measured at each seed (at T > 0 each seed writes a text of its
own); each (prompt, seed) is a cell where the ways run side by side, and each way's ratio to the
best fixed k gets a 95 % interval across the cells (intervals.ratio_interval).

Produces docs/auto.md, "-k auto in one-off calls".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intervals import ratio_interval, shown  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle gear system works.",
    "Describe a busy market on a winter morning.",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain why the sky is blue, for a child.",
    "Write a short story about a robot who learns to paint.",
]


def builtin() -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT))
    from specdec_cli.models.cache import builtin_pair

    return builtin_pair()


def call(draft: Path, target: Path, prompt: str, temperature: float, max_tokens: int, cache: Path, *args: str, seed: int = 1) -> tuple[int, float]:
    """(new tokens, generation seconds) of one fresh `specdec run`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPECDEC_CACHE=str(cache))
    env.pop("SPECDEC_NO_TUNING_CACHE", None)
    argv = [sys.executable, "-m", "specdec_cli.cli", "run", "--draft", str(draft), "--target", str(target), "--temperature", str(temperature),
            "-n", str(max_tokens), "--seed", str(seed), "--json", *args, prompt]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"specdec run failed:\n{done.stderr}")
    stats = json.loads(done.stdout)["stats"]
    return stats["new_tokens"], stats["new_tokens"] / stats["tokens_per_second"] if stats["tokens_per_second"] else 0.0


def measure(draft: Path, target: Path, temperature: float, ks: list[int], max_tokens: int, work: Path, seeds: list[int]) -> dict:
    ways: dict[str, list[tuple[int, float]]] = {}

    def add(way: str, result: tuple[int, float]) -> None:
        ways.setdefault(way, []).append(result)

    ten = work / f"ten-{temperature}"
    for i in range(10):  # the folder "after ten" starts from
        call(draft, target, PROMPTS[i % len(PROMPTS)], temperature, max_tokens, ten)
    for seed, (i, prompt) in itertools.product(seeds, enumerate(PROMPTS)):
        fresh = Path(tempfile.mkdtemp(dir=work))
        add("auto, first call", call(draft, target, prompt, temperature, max_tokens, fresh, seed=seed))
        second = Path(tempfile.mkdtemp(dir=work))
        call(draft, target, PROMPTS[(i + 1) % len(PROMPTS)], temperature, max_tokens, second, seed=seed)
        add("auto, second call", call(draft, target, prompt, temperature, max_tokens, second, seed=seed))
        add("auto, after ten calls", call(draft, target, prompt, temperature, max_tokens, ten, seed=seed))
        for k in ks:
            add(f"k = {k}", call(draft, target, prompt, temperature, max_tokens, work, "-k", str(k), "--no-tuning-cache", seed=seed))
        add("target-only", call(draft, target, prompt, temperature, max_tokens, work, "--drafter", "none", "--no-tuning-cache", seed=seed))
    rates = {way: sum(t for t, _ in r) / sum(s for _, s in r) for way, r in ways.items()}
    best = max((w for w in rates if w.startswith("k = ")), key=rates.get)
    # Each (prompt, seed) is a side-by-side cell: a way's ratio to the best fixed k there, with an
    # interval across the cells (the machine drifts between cells more than within one).
    ratios = {way: [a[0] / a[1] / (b[0] / b[1]) for a, b in zip(r, ways[best])] for way, r in ways.items()}
    return {"tokens_per_s": rates, "best_fixed": best, "cells": len(ways[best]), "intervals": {w: ratio_interval(v) for w, v in ratios.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 6, 8, 12])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="each prompt at each seed (T > 0: a text of its own)")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("DRAFT", "TARGET"), help="default: the built-in pair")
    parser.add_argument("--out", type=Path, default=Path("auto_record.json"))
    args = parser.parse_args()
    draft, target = args.pair or builtin()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in args.temperatures:
            out[str(t)] = measure(draft, target, t, args.ks, args.max_tokens, Path(tmp), args.seeds)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"{len(PROMPTS)} prompts x {args.max_tokens} tokens, each a fresh `specdec run`\n")
    print("| T | way | tokens/s | of the best fixed k | per (prompt, seed): interval |")
    print("|---|---|---|---|---|")
    for t, row in out.items():
        best = row["tokens_per_s"][row["best_fixed"]]
        for way, rate in row["tokens_per_s"].items():
            print(f"| {t} | {way}{' (best)' if way == row['best_fixed'] else ''} | {rate:.1f} | {rate / best:.2f} | {shown(row['intervals'][way])} |")


if __name__ == "__main__":
    main()
