"""Many sequences in one batch on the GPU: the served engine's answers and its throughput.

On gpu_check.py's random pair (its --shape; every layer offloaded where llama.cpp has a GPU
backend), the server's Worker (serve/worker.py) runs in this process with --slots sequences
sharing each pass, without HTTP:

1. identity at T = 0: each prompt alone, target only (the reference), then all of them at
   once, speculative (model drafter, k = 4) and target only. Where an answer of the batch parts
   from its reference, the gap between the target's two likeliest logits there, decoded alone
   (a batch of another shape takes other kernels, which round differently: a near-tie may turn);
2. throughput: for each client count, every client sends --requests prompts in turn,
   --max-tokens tokens each at T = 0: aggregate tokens/s (tokens over the load's wall time),
   with the server's default drafting (model, k auto) and with speculation off, in turns.

Random models agree on nothing (acceptance 0), so (2) measures how batching scales and what
`auto` costs where drafting never pays, not a speed-up.

    python3 benchmarks/gpu_batch.py --shape gpu --out DIR     # gpu_check.sh --batch runs this
    python3 benchmarks/gpu_batch.py --shape tiny --out DIR    # here: the CPU-only build

Output: DIR/gpu_batch.json and DIR/gpu_batch.txt.

Left out: HTTP (benchmarks/serving_batch.py serves real pairs through it).

Produces docs/benchmarks.md, "The GPU machine": the batched check (gpu_batch.txt), run by gpu_check.sh --batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py
import numpy as np  # noqa: E402

import synthetic_gguf as sg  # noqa: E402
from gpu_check import SIZES  # noqa: E402
from synthetic_pair import random_model  # noqa: E402

from specdec_cli.bench.stats import first_divergence  # noqa: E402
from specdec_cli.events import AUTO  # noqa: E402
from specdec_cli.serve.types import Settings  # noqa: E402
from specdec_cli.serve.worker import Worker  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from worker_load import answer, load, running, settings  # noqa: E402

TOPICS = ["the sea", "a lighthouse", "autumn leaves", "a busy market", "the moon", "a small robot", "a mountain village", "rain on a window"]


def story(i: int) -> str:
    """The i-th prompt (the topics in turn)."""
    return f"Write a short story about {TOPICS[i % len(TOPICS)]}."


async def at_once(worker: Worker, prompts: list[str], s: Settings) -> list:
    return await asyncio.gather(*(answer(worker, p, s) for p in prompts))


def passes(worker: Worker) -> dict[str, int]:
    """The passes and rows each model has run so far (the batcher's log)."""
    log, counts = worker.batcher.log, {}
    for name in worker.batcher.names:
        counts[f"{name} passes"], counts[f"{name} rows"] = sum(log.sequences[name].values()), log.rows[name]
    return counts


def near_tie_gap(worker: Worker, prompt: str, mine: list[int], n: int) -> float:
    """The gap between the target's two likeliest logits after `prompt` and mine[:n] (where `mine`
    left its reference), decoded alone in slot 0."""
    view = worker.slots[0].pair.target
    ids = worker.pair.prompt_tokens(prompt, chat=False)
    view.rewind(0)
    row = np.array(view.decode(ids + mine[:n], 1)[0], dtype=np.float64)
    view.rewind(0)
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def check(shape: str, out: Path, slots: int, clients: list[int], requests: int, max_tokens: int, threads: int | None, models: Path | None = None) -> dict:
    draft_name, target_name = SIZES[shape][:2]
    draft, target = random_model(sg.SHAPES[draft_name], seed=0, directory=models), random_model(sg.SHAPES[target_name], seed=1, directory=models)
    result: dict = {"shape": shape, "slots": slots, "max_tokens": max_tokens}
    prompts = [story(i) for i in range(slots)]
    with open_pair(draft, target, LoadOptions(n_ctx=1024, slots=slots, n_threads=threads)) as pair:
        result["gpu_layers"] = {"target": pair.target.n_gpu_layers, "draft": pair.draft.n_gpu_layers}
        worker = Worker(lambda stack: pair, queue_size=max(clients) * requests + slots, slots=slots)
        with running(worker) as loop:
            plain, drafted = settings("none", 0, max_tokens), settings("model", 4, max_tokens)
            reference = [loop.run_until_complete(answer(worker, p, plain)).tokens for p in prompts]
            rows = []
            for name, s in (("speculative k=4", drafted), ("target only", plain)):
                for prompt, ref, got in zip(prompts, reference, loop.run_until_complete(at_once(worker, prompts, s))):
                    where = first_divergence(ref, got.tokens)
                    gap = None if where is None else near_tie_gap(worker, prompt, got.tokens, where)
                    rows.append({"mode": name, "prompt": prompt, "tokens": len(got.tokens), "divergence": where, "gap": gap})
            result["identity"] = rows
            load_rows = []
            for c in clients:
                for name, s in (("auto", settings("model", AUTO, max_tokens)), ("off", plain)):
                    before = passes(worker)
                    tokens, seconds = loop.run_until_complete(load(worker, c, requests, s, story))
                    after = passes(worker)
                    load_rows.append({"clients": c, "drafting": name, "tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": tokens / seconds,
                                      "passes": {key: after[key] - before[key] for key in after}})  # fmt: skip
                    write(result | {"load": load_rows}, out)
            result["load"] = load_rows
            result["passes"] = worker.batcher.drafting_report()
    write(result, out)
    return result


def write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_batch.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "gpu_batch.txt").write_text(summary(result))


def summary(r: dict) -> str:
    lines = [f"batched check ({r['shape']}), {r['slots']} slots, {r['max_tokens']} tokens per answer, layers on GPU: {r.get('gpu_layers')}"]
    for row in r.get("identity", []):
        part = "same as alone" if row["divergence"] is None else f"parts at token {row['divergence']} (top-two gap {row['gap']:.4f})"
        lines.append(f"  {row['mode']:<16} {row['prompt']!r}: {row['tokens']} tokens, {part}")
    for row in r.get("load", []):
        counts = ", ".join(f"{key} {value}" for key, value in row.get("passes", {}).items())
        lines.append(f"  {row['clients']} clients, drafting {row['drafting']:<4}: {row['tokens_per_s']:.1f} tok/s ({row['tokens']} tokens in {row['seconds']} s; {counts})")
    for n, seen in r.get("passes", {}).items():
        lines.append(f"  the switch at {n} sequences: {seen}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--models", type=Path, help="where the random models are (default: specdec's cache), as gpu_check.py's")
    args = parser.parse_args()
    result = check(args.shape, args.out, args.slots, args.clients, args.requests, args.max_tokens, args.threads, args.models)
    sys.stdout.write(summary(result))
    return 0 if all(row["divergence"] is None for row in result["identity"]) else 1


if __name__ == "__main__":
    sys.exit(main())
