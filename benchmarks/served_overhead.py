"""The server's own time per target pass: `-k auto` with a draft model that never pays, against speculation off.

On the GPU machine (docs/benchmarks.md, "The GPU machine") the served worker with `auto` and a
draft that never agreed ran 0.87x of speculation off at 4 and 8 clients, with no draft pass at
all and as many target passes and rows: the difference was the engine's own Python per round.
This measures that time where nothing else moves: the server's Worker (serve/worker.py, no
HTTP) with --slots sequences on the toy pair of the tests (tests/fakes.py: 26 letters, so
sampling costs nearly nothing), the target's pass sleeping --pass-ms (GIL free, as a GPU's
wait is) and the draft's --draft-ms. Each of --clients clients sends --requests prompts in
turn, --max-tokens tokens each at T = 0, drafting `model` with k auto, then `none`.

Per way: wall overhead per target pass = (wall - passes x pass-ms - draft passes x draft-ms) /
target passes, and the process's CPU seconds per target pass. "before" is the code of git ref
--before (exported with `git archive`), "after" the code next to this script, each in its own
child process; the versions alternate repeat by repeat, and each cell is the median of --repeats (and their range).

    flock /tmp/llama.lock python3 benchmarks/served_overhead.py --before c5430e7

Left out: real models (benchmarks/serving_batch.py, gpu_batch.py), sampling at a real
vocabulary (benchmarks/overhead.py), HTTP.

Produces docs/serving.md, "The server's own time per pass".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import code_first, export  # noqa: E402

WAYS = ("auto", "off")


def letter(i: int) -> str:
    """The i-th prompt: one of the toy pair's first letters, in turn."""
    return "abcd"[i % 4]


def child(clients: list[int], requests: int, max_tokens: int, pass_ms: float, draft_ms: float, slots: int) -> dict:
    """This process's code (PYTHONPATH): per client count and way, the overhead per target pass."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes import ToyModel, successor_table

    from specdec_cli.events import AUTO
    from specdec_cli.serve.worker import Worker
    from specdec_cli.session import LoadedPair
    from worker_load import load, running, settings

    code = Path(os.environ["SPECDEC_SERVED_CODE"]).resolve()
    assert Path(sys.modules["specdec_cli"].__file__).resolve().is_relative_to(code), "the child imported another version's code"
    target = ToyModel(successor_table(), seconds_per_decode=pass_ms / 1000)
    draft = ToyModel(successor_table({i: (i + 7) % 26 for i in range(26)}), seconds_per_decode=draft_ms / 1000)  # never the target's letter
    pair = LoadedPair(target=target, draft=draft, vocab_limit=26)

    ways = {"auto": settings("model", AUTO, max_tokens), "off": settings("none", 0, max_tokens)}
    worker = Worker(lambda stack: pair, queue_size=max(clients) * requests + slots, slots=slots)
    out: dict = {}
    with running(worker, ready_seconds=30) as loop:
        loop.run_until_complete(load(worker, 1, requests, ways["auto"], letter))  # warm
        for n in clients:
            for way, s in ways.items():
                passes, drafts, cpu, start = len(target.passes), len(draft.passes), time.process_time(), time.perf_counter()
                tokens, _ = loop.run_until_complete(load(worker, n, requests, s, letter))
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                passes, drafts = len(target.passes) - passes, len(draft.passes) - drafts
                waited = (passes * pass_ms + drafts * draft_ms) / 1000
                out[f"{n} {way}"] = {"tokens": tokens, "target_passes": passes, "draft_passes": drafts,
                                     "wall_ms_per_pass": (wall - waited) / passes * 1000, "cpu_ms_per_pass": cpu / passes * 1000}  # fmt: skip
    return out


def run_child(code: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", "--clients", *map(str, args.clients), "--requests", str(args.requests), "--max-tokens", str(args.max_tokens),
           "--pass-ms", str(args.pass_ms), "--draft-ms", str(args.draft_ms), "--slots", str(args.slots)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=code_first(code), SPECDEC_SERVED_CODE=str(code))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"child for {code} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    """The median and, with several, the range: "1.07 (0.91-1.27)"."""
    middle = f"{statistics.median(values):.2f}"
    return middle if len(values) < 2 else f"{middle} ({min(values):.2f}-{max(values):.2f})"


def table(runs: dict[str, list[dict]], clients: list[int]) -> str:
    """Markdown: per client count and way, each version's wall overhead and CPU ms per target pass (median and range)."""
    versions = list(runs)
    head = "| clients | way | " + " | ".join(f"{v}: overhead ms / pass | {v}: CPU ms / pass" for v in versions) + " | draft passes (last) |"
    lines = [head, "|---|---|" + "---|---|" * len(versions) + "---|"]
    for n in clients:
        for way in WAYS:
            key, cells = f"{n} {way}", []
            for v in versions:
                rows = [r[key] for r in runs[v]]
                cells += [spread([r["wall_ms_per_pass"] for r in rows]), spread([r["cpu_ms_per_pass"] for r in rows])]
            lines.append(f"| {n} | {way} | " + " | ".join(cells) + f" | {runs[versions[-1]][-1][key]['draft_passes']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--pass-ms", type=float, default=3.0, help="a target pass (the H200's random 7B: 3.9 ms alone)")
    parser.add_argument("--draft-ms", type=float, default=1.0, help="a draft pass (the H200's random 0.5B: 1.1 ms)")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default="main", help="git ref of the 'before' column ('' to skip it)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.clients, args.requests, args.max_tokens, args.pass_ms, args.draft_ms, args.slots)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"before": export(args.before, Path(tmp)), "after": ROOT} if args.before else {"after": ROOT}
        runs: dict[str, list[dict]] = {v: [] for v in versions}
        for _ in range(args.repeats):
            for v, code in versions.items():
                runs[v].append(run_child(code, args))
    print(f"toy pair, target pass {args.pass_ms} ms, draft pass {args.draft_ms} ms, {args.requests} requests x {args.max_tokens} tokens per client, "
          f"{args.slots} slots, median of {args.repeats}\n")  # fmt: skip
    print(table(runs, args.clients))


if __name__ == "__main__":
    main()
