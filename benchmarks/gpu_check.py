"""The GPU check's measurement (gpu_check.sh builds llama-cpp-python, then runs this).

On a random pair of 0.5B/7B-like shape (synthetic_gguf.SHAPES, Q4_0, every layer offloaded
when llama.cpp has a GPU backend) it runs, in order, and writes after every stage so that a
run cut short still leaves what it measured:

0. the import order (specdec_cli/__init__.py): the draft loaded by specdec's LlamaModel in
   two fresh interpreters, one that imports numpy first and one that imports specdec_cli
   first; each one's exit code (-11: a segfault);
1. greedy identity: speculative output (model drafter at k = 8, prompt lookup at k = 4)
   against target-only output, token for token, on two prompts;
2. the target's verify-cost curve T(n) for n = 1..16 and one draft step at the end of the
   prompt (cost_curve.measure_cost_curve, medians of 5; over a long text steps cost more);
3. `specdec bench` (bench.run.run_bench) at T = 0 and 0.8, model drafter, k in {4, 8, auto}:
   tokens/s both ways and the Python time per round outside llama.cpp's decode calls;
4. Theorem 3.8's predicted speed-up from the cost curve for a range of acceptance rates
   (random models agree on nothing, so the measured speed-up says nothing about a real pair).

    python3 benchmarks/gpu_check.py --shape gpu --out /tmp/gpu-check    # gpu_check.sh does this
    python3 benchmarks/gpu_check.py --shape tiny --out /tmp/cpu-check   # the CPU test's size

Output: DIR/gpu_check.json (everything) and DIR/summary.txt (a short text summary).

Left out: building llama-cpp-python (gpu_check.sh) and writing the models (synthetic_gguf.py).

Produces docs/benchmarks.md, "The GPU machine": the GPU check (gpu_check.json, summary.txt), run by gpu_check.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import specdec_cli  # noqa: E402,F401  before numpy (gguf, synthetic_gguf): see specdec_cli/__init__.py
import synthetic_gguf as sg  # noqa: E402
from synthetic_pair import ALPHAS, predictions, random_model  # noqa: E402

from specdec_cli.llama.platform import gpu_offload_supported  # noqa: E402
from specdec_cli.bench.run import decode_once, run_bench  # noqa: E402
from specdec_cli.bench.model import SPECULATIVE, BenchConfig  # noqa: E402
from specdec_cli.bench.stats import first_divergence  # noqa: E402
from specdec_cli.tuning.cost_curve import measure_cost_curve  # noqa: E402
from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402
from specdec_cli.events import AUTO  # noqa: E402
from specdec_cli.prompts import BUILTIN_PROMPTS  # noqa: E402
from specdec_cli.maths.sampling import GREEDY  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402

# name -> (draft shape, target shape, generated tokens, bench k, cost-curve length)
SIZES = {
    "gpu": ("0.5b", "7b", 128, (4, 8, AUTO), 16),
    "tiny": ("tiny-draft", "tiny-target", 16, (2, AUTO), 16),
}
PROMPTS = [p for p in BUILTIN_PROMPTS if p.name in ("chat", "story")]
IDENTITY = (("model", 8), ("lookup", 4))


def check(size: str, out: Path, models: Path | None, threads: int | None, repack: bool | None = None) -> dict:
    draft_name, target_name, n_tokens, ks, max_batch = SIZES[size]
    shapes = (sg.SHAPES[draft_name], sg.SHAPES[target_name])
    result: dict = {"size": size, "shapes": {"draft": dataclasses.asdict(shapes[0]), "target": dataclasses.asdict(shapes[1])}}
    result["platform"] = {"python": platform.python_version(), "machine": platform.machine()}
    stage = Stages(result, out)

    with stage("write models"):
        draft = random_model(shapes[0], seed=0, directory=models)
        target = random_model(shapes[1], seed=1, directory=models)
        result["files"] = {"draft": str(draft), "target": str(target), "draft_mib": draft.stat().st_size / 2**20, "target_mib": target.stat().st_size / 2**20}

    with stage("import order"):
        result["import_order"] = import_order(draft, repack)

    # gpu_layers None: every layer on the GPU if there is one; repack None: specdec's default
    options = LoadOptions(n_ctx=2048, n_threads=threads, repack=repack)
    loading = time.perf_counter()
    with open_pair(draft, target, options) as pair:
        result["seconds"]["load"] = round(time.perf_counter() - loading, 3)
        result["llama_cpp"] = {"version": importlib.metadata.version("llama-cpp-python"), "gpu_offload": gpu_offload_supported(),
                               "target_gpu_layers": pair.target.n_gpu_layers, "draft_gpu_layers": pair.draft.n_gpu_layers,
                               "repack": pair.target.repack}

        with stage("identity"):
            rows = []
            for prompt in PROMPTS:
                ids = pair.prompt_tokens(prompt.text)
                expected = consume(pair.engine(speculative=False).generate(ids, GenerationConfig(max_tokens=n_tokens, sampling=GREEDY))).tokens
                for drafter, k in IDENTITY:
                    outcome = decode_once(pair.engine(drafter=drafter), ids, GenerationConfig(max_tokens=n_tokens, sampling=GREEDY), k)
                    stats, got = outcome.stats, outcome.tokens
                    rows.append({"prompt": prompt.name, "drafter": drafter, "k": k, "tokens": len(got), "drafted": stats.drafted,
                                 "accepted": stats.accepted, "divergence": first_divergence(expected, got)})
            result["identity"] = rows
            result["identical"] = all(r["divergence"] is None for r in rows)

        with stage("cost curve"):
            ids = pair.prompt_tokens(PROMPTS[0].text)
            cost = measure_cost_curve(pair.target, pair.draft, ids, max_batch, repeats=5)
            result["cost"] = {"draft_step_ms": 1000 * cost.draft_step, "target_batch_ms": [1000 * t for t in cost.target_batch],
                              "cost_ratio": cost.draft_step / cost.target_step}
            result["predictions"] = predictions(cost, ALPHAS)

        with stage("bench"):
            config = BenchConfig(draft_tokens=ks, drafters=("model",), temperatures=(0.0, 0.8), max_tokens=n_tokens, repeats=1, cost_repeats=3)
            report = run_bench(pair, PROMPTS, config)
            result["bench"] = [bench_row(report, r) for r in report.results]
            result["bench_exact"] = not report.divergences
            result["python_ms_per_round"] = statistics.median(r["python_ms_per_round"] for r in result["bench"])
    stage.write()
    return result


# What each fresh interpreter imports before loading the model, in this order.
IMPORT_ORDERS = {"numpy first": "import numpy", "specdec_cli first": "import specdec_cli; import numpy"}


def import_order(model: Path, repack: bool | None) -> dict[str, int]:
    """The exit code of a model load (every layer on the GPU if there is one) after each of IMPORT_ORDERS."""
    load = f"from specdec_cli.llama.model import LlamaModel; LlamaModel({str(model)!r}, n_ctx=512, repack={repack!r}).close()"
    root = str(Path(__file__).resolve().parents[1])
    codes = {}
    for name, imports in IMPORT_ORDERS.items():
        code = f"import sys; sys.path.insert(0, {root!r}); {imports}; {load}"
        codes[name] = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300).returncode
    return codes


def bench_row(report, r) -> dict:
    b_runs = [run for run in report.runs if run.step.mode == SPECULATIVE and run.step.setting == r.setting]
    per_round = [1000 * run.stats.generation_seconds / run.stats.target_passes for run in b_runs if run.stats.target_passes]
    outside = [1000 * run.stats.python_share * run.stats.generation_seconds / run.stats.target_passes for run in b_runs if run.stats.target_passes]
    s = r.setting
    return {
        "prompt": s.prompt, "temperature": s.temperature, "k": s.k,
        "target_tps": r.target_tps.median, "speculative_tps": r.speculative_tps.median, "speedup": r.speedup.median,
        "acceptance_rate": r.acceptance_rate, "mean_k": r.mean_k, "predicted_speedup_at_measured_alpha": r.predicted_speedup,
        "ms_per_round": statistics.median(per_round), "python_ms_per_round": statistics.median(outside),
        "python_share": r.python_share, "exact": not r.divergences,
    }


class Stages:
    """Times each stage into result["seconds"] and rewrites the JSON and summary after each one."""

    def __init__(self, result: dict, out: Path) -> None:
        self.result, self.out = result, out
        self.result["seconds"] = {}
        out.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def __call__(self, name: str):
        print(f"[gpu_check] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.result["seconds"][name] = round(time.perf_counter() - t0, 3)
            self.write()

    def write(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.result, indent=1, default=str) + "\n")
        (self.out / "summary.txt").write_text(summary(self.result))


def summary(r: dict) -> str:
    lines = [f"specdec GPU check ({r['size']}): random draft {r['shapes']['draft']['hidden']}x{r['shapes']['draft']['layers']}, "
             f"target {r['shapes']['target']['hidden']}x{r['shapes']['target']['layers']}, {r['shapes']['target']['quant']}"]
    if "llama_cpp" in r:
        lc = r["llama_cpp"]
        lines.append(f"llama-cpp-python {lc['version']}, GPU offload {'yes' if lc['gpu_offload'] else 'NO'}, "
                     f"layers on GPU: target {lc['target_gpu_layers']}, draft {lc['draft_gpu_layers']}, repack {'on' if lc.get('repack') else 'off'}")
    if "import_order" in r:
        lines.append("model load after each import order (exit code; -11: a segfault): "
                     + ", ".join(f"{name} {code}" for name, code in r["import_order"].items()))
    if "identity" in r:
        lines.append(f"greedy identity (speculative == target-only): {'yes' if r['identical'] else 'NO'} in {len(r['identity'])} runs")
    if "cost" in r:
        c = r["cost"]
        lines.append(f"draft step {c['draft_step_ms']:.2f} ms, c = {c['cost_ratio']:.3f}; T(n) ms: "
                     + " ".join(f"{t:.2f}" for t in c["target_batch_ms"]))
        lines.append("predicted speed-up (best k): " + ", ".join(f"alpha {p['alpha']:g}: {p['predicted_speedup']:.2f}x (k={p['best_k']})" for p in r["predictions"]))
    if "bench" in r:
        lines.append(f"bench exact at T=0: {'yes' if r['bench_exact'] else 'NO'}; Python ms per round (median): {r['python_ms_per_round']:.2f}")
        for b in r["bench"]:
            lines.append(f"  {b['prompt']:<6} T={b['temperature']:g} k={b['k']}: target {b['target_tps']:.1f} tok/s, "
                         f"speculative {b['speculative_tps']:.1f} tok/s, accept {b['acceptance_rate']:.0%}, {b['ms_per_round']:.2f} ms/round")
    lines.append("stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r["seconds"].items()))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", type=Path, help="where the random models go (default: specdec's cache)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--repack", action=argparse.BooleanOptionalAction, help="as specdec's --repack/--no-repack (default: its own default)")
    args = parser.parse_args()
    result = check(args.shape, args.out, args.models, args.threads, args.repack)
    sys.stdout.write(summary(result))
    return 0 if result.get("identical") and result.get("bench_exact") else 1


if __name__ == "__main__":
    sys.exit(main())
