"""One-off `specdec run --rpc` calls over a 10 ms round trip: target-only, k = 16 and auto.

Every measurement is a fresh `specdec run` process, as a new user runs it: the built-in pair
(no --draft/--target), the target's layers on a ggml-rpc-server on 127.0.0.1 reached through
delay_proxy.py (5 ms each way by default), --max-tokens tokens per prompt at a fixed seed. The
ways, in turns prompt by prompt (their order rotating), so that the machine's drift falls on
all of them alike:

  - target-only (`--drafter none`) and k = 16, with --no-tuning-cache;
  - auto, first call: in a cache folder with no tuning record (tuning/record.py);
  - auto, second call: in the folder of the previous prompt's first call (one call on another
    prompt; the first prompt's comes from one call on the last prompt, not counted);
  - with --warmed, k = 16 and both auto calls again, each process first running one pass of each
    batch size 1 to AUTO_MAX_K + 1 on the target right after it loads, and rolling it back: what
    a load-time warm-up of the shapes would give (specdec does not warm them; docs/rpc.md says
    why). The warm-up's seconds are reported apart.

One server and one proxy serve every call (the record's identity names the endpoint). The cache
folders are this script's own (SPECDEC_CACHE), each holding a link to the user's converted
target, so nothing is converted and the user's record is untouched. A way's speed is its tokens
over its generation seconds (prefill and loading excluded, as `specdec run --json` reports
tokens/s), summed over the prompts; each process's wall seconds are kept in --out (for a fixed
k they include the cost measurement behind the predicted speed-up, which runs after the text).

    flock /tmp/llama.lock python3 benchmarks/rpc_oneoff.py --temperatures 0 --warmed --out /tmp/oneoff_t0.json
    flock /tmp/llama.lock python3 benchmarks/rpc_oneoff.py --temperatures 0.8 --warmed --out /tmp/oneoff_t08.json

Produces docs/rpc.md, "One-off calls": its table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from auto_record import PROMPTS  # noqa: E402
from delay_proxy import DelayProxy  # noqa: E402
from rpc import start_server  # noqa: E402

WAYS = ("target-only", "k=16", "auto, first call", "auto, second call")
WARMED = ("k=16, warmed", "auto, first call, warmed", "auto, second call, warmed")
WARM_CHILD = "warm-child"  # argv[1] of a process that warms the target, then runs the CLI


def cache_folder(work: Path, target: Path) -> Path:
    """A fresh SPECDEC_CACHE with no tuning record, holding a link to the converted built-in target."""
    folder = Path(tempfile.mkdtemp(dir=work))
    (folder / target.name).symlink_to(target)
    return folder


def call(endpoint: str, prompt: str, temperature: float, max_tokens: int, cache: Path, *args: str, warm: bool = False) -> dict:
    """One fresh `specdec run --rpc`: its new tokens, generation seconds, mean k, wall seconds and
    warm-up seconds (0 without `warm`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPECDEC_CACHE=str(cache))
    env.pop("SPECDEC_NO_TUNING_CACHE", None)
    entry = [str(Path(__file__).resolve()), WARM_CHILD] if warm else ["-m", "specdec_cli.cli"]
    argv = [sys.executable, *entry, "run", "--rpc", endpoint, "--temperature", str(temperature),
            "-n", str(max_tokens), "--seed", "1", "--json", *args, prompt]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"specdec run failed:\n{done.stderr[-3000:]}")
    stats = json.loads(done.stdout)["stats"]
    warmed = re.search(r"warm-up: ([\d.]+) s", done.stderr)
    return {
        "tokens": stats["new_tokens"], "seconds": stats["generation_seconds"], "wall": wall,
        "mean_k": stats["drafted"] / stats["target_passes"] if stats["target_passes"] else 0.0,
        "warm_up": float(warmed.group(1)) if warmed else 0.0,
    }  # fmt: skip


def measure(endpoint: str, target: Path, temperature: float, prompts: list[str], max_tokens: int, work: Path, warmed: bool) -> dict:
    ways = WAYS + (WARMED if warmed else ())
    calls: dict[str, list[dict]] = {way: [] for way in ways}
    fixed = cache_folder(work, target)  # target-only and k = 16 keep no record
    previous = {warm: cache_folder(work, target) for warm in (False, True)}
    for warm in (False, True)[: 1 + warmed]:  # each chain's first prompt's second call follows one call on the last prompt
        call(endpoint, prompts[-1], temperature, max_tokens, previous[warm], warm=warm)
    for i, prompt in enumerate(prompts):
        fresh = {warm: cache_folder(work, target) for warm in (False, True)}

        def run(way: str) -> dict:
            warm = way.endswith("warmed")
            if way.startswith("target-only"):
                return call(endpoint, prompt, temperature, max_tokens, fixed, "--drafter", "none", "--no-tuning-cache")
            if way.startswith("k=16"):
                return call(endpoint, prompt, temperature, max_tokens, fixed, "-k", "16", "--no-tuning-cache", warm=warm)
            folder = fresh[warm] if way.startswith("auto, first") else previous[warm]
            return call(endpoint, prompt, temperature, max_tokens, folder, "-k", "auto", warm=warm)

        for way in ways[i % len(ways) :] + ways[: i % len(ways)]:
            calls[way].append(run(way))
        previous = fresh
        line = ", ".join(f"{w} {c[-1]['tokens'] / c[-1]['seconds']:.1f}" for w, c in calls.items())
        print(f"T = {temperature:g}, prompt {i + 1}/{len(prompts)}: {line} tok/s", file=sys.stderr, flush=True)
    return summarise(calls)


def summarise(calls: dict[str, list[dict]]) -> dict:
    rows = {}
    for way, cs in calls.items():
        tokens, seconds = sum(c["tokens"] for c in cs), sum(c["seconds"] for c in cs)
        rows[way] = {
            "tokens_per_second": round(tokens / seconds, 2), "generation_seconds": round(seconds / len(cs), 3),
            "mean_k": round(sum(c["mean_k"] for c in cs) / len(cs), 2), "warm_up_seconds": round(sum(c["warm_up"] for c in cs) / len(cs), 3),
            "wall_seconds": round(sum(c["wall"] for c in cs) / len(cs), 2), "per_prompt": [round(c["tokens"] / c["seconds"], 2) for c in cs],
        }  # fmt: skip
    base, k16 = rows["target-only"]["tokens_per_second"], rows["k=16"]["tokens_per_second"]
    for way, row in rows.items():
        row["vs_target_only"] = round(row["tokens_per_second"] / base, 3)
        if way.startswith("auto"):
            row["vs_k16"] = round(row["tokens_per_second"] / rows["k=16" + (", warmed" if way.endswith("warmed") else "")]["tokens_per_second"], 3)
    return rows


def print_table(result: dict) -> None:
    print(f"{result['prompts']} prompts x {result['max_tokens']} tokens, {2 * result['delay_ms']:g} ms round trip")
    print("| T | way | tokens/s | vs target-only | vs k = 16 | auto's k | generation seconds a call | warm-up seconds a call |")
    print("|---|---|---|---|---|---|---|---|")
    for t, rows in result["temperatures"].items():
        for way, row in rows.items():
            vs_k16 = f"{row['vs_k16']:.2f}" if "vs_k16" in row else ""
            mean_k = f"{row['mean_k']:.1f}" if way.startswith("auto") else ""
            warm = f"{row['warm_up_seconds']:.2f}" if way.endswith("warmed") else ""
            print(f"| {t} | {way} | {row['tokens_per_second']:.1f} | {row['vs_target_only']:.2f}x | {vs_k16} | {mean_k} | {row['generation_seconds']:.2f} | {warm} |")


def warm_child(argv: list[str]) -> None:
    """Run the CLI with `argv`, the target warmed right after it loads over RPC: one pass of each
    batch size 1 to AUTO_MAX_K + 1 (n tokens, n rows of logits), rolled back; its seconds on stderr."""
    import specdec_cli  # noqa: F401  before numpy: see specdec_cli/__init__.py
    from specdec_cli.llama.model import LlamaModel
    from specdec_cli.tuning.adaptive import AUTO_MAX_K

    load = LlamaModel.__init__

    def load_and_warm(self, *args, **kwargs) -> None:
        load(self, *args, **kwargs)
        if self.rpc_servers and kwargs.get("role") == "target":
            start = time.perf_counter()
            for n in range(1, AUTO_MAX_K + 2):
                self.decode([self.vocab.bos] * n, n)
                self.rewind(0)
            print(f"warm-up: {time.perf_counter() - start:.3f} s", file=sys.stderr, flush=True)

    LlamaModel.__init__ = load_and_warm
    sys.argv = ["specdec", *argv]
    runpy.run_module("specdec_cli.cli", run_name="__main__")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    parser.add_argument("--max-tokens", "-n", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many of the {len(PROMPTS)} prompts (auto_record.py's)")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="milliseconds added each way (default 5: a 10 ms round trip)")
    parser.add_argument("--warmed", action="store_true", help="also k = 16 and auto with the target's batch shapes warmed at load")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from specdec_cli.llama import rpc
    from specdec_cli.models.cache import builtin_pair

    _, target = builtin_pair()
    binary = Path(subprocess.run(["bash", str(ROOT / "benchmarks" / "build_rpc_server.sh")], capture_output=True, text=True, check=True).stdout.split()[-1])
    server, endpoint = start_server(binary)
    result = {"max_tokens": args.max_tokens, "prompts": args.prompts, "delay_ms": args.delay_ms, "temperatures": {}}
    try:
        with DelayProxy(rpc.address(endpoint), args.delay_ms / 1e3) as proxy, tempfile.TemporaryDirectory() as work:
            for t in args.temperatures:
                result["temperatures"][f"{t:g}"] = measure(proxy.endpoint, target, t, PROMPTS[: args.prompts], args.max_tokens, Path(work), args.warmed)
    finally:
        server.terminate()
        server.wait(30)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print_table(result)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [WARM_CHILD]:
        warm_child(sys.argv[2:])
    else:
        sys.exit(main())
