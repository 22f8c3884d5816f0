"""Speed and memory measurement: target-only against speculative decoding, side by side.

One prompt ("Write a short story about a robot who learns to paint.", chat template),
temperature 0, 128 tokens, target-only (A) and speculative (B) interleaved A B A B over
`--repeats` passes of k in 4, 8, 12, 16, on the SAME loaded models (bench.run.run_bench does the
measuring). For each k it reports:

- tokens/s both ways and the measured speed-up (median of the per-repeat A/B ratios, range);
- the run's own acceptance (alpha), the draft-step cost and the verify-batch cost T(k + 1)
  measured on this machine, and the speed-up Leviathan et al.'s Theorem 3.8 predicts from
  them; the ratio measured / predicted (issue 2 asks for it within 10%, i.e. >= 0.90);
- the Python time per round outside llama.cpp's decode calls, as a share of the round;
- peak RSS (resource.getrusage) after loading and at the end, next to the model files and to
  the n_ctx x n_vocab float32 buffer that a logits_all design would allocate.

Run it inside the shared lock on the 2-core machine (two llama.cpp processes at once make
both crawl):

    flock /tmp/specdec-llama.lock python benchmarks/speed.py              # built-in pair
    flock /tmp/specdec-llama.lock python benchmarks/speed.py --json > speed.json

Left out: the sweep over prompts and temperatures (`specdec bench`), plots.

Produces docs/benchmarks.md, "The built-in pair": the paragraph "One prompt, two states of one host".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from specdec_cli.bench.run import run_bench  # noqa: E402
from specdec_cli.bench.model import SPECULATIVE, BenchConfig  # noqa: E402
from specdec_cli.options import parse_draft_tokens  # noqa: E402
from specdec_cli.prompts import Prompt  # noqa: E402

PROMPT = Prompt("robot", "story", "Write a short story about a robot who learns to paint.")
FLOOR = 1.8  # issue 2: at least 1.8x target-only tokens/s at the best k on this prompt
MODEL_FIT = 0.90  # issue 2: measured speed-up within 10% of Theorem 3.8's prediction


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def measure(args: argparse.Namespace) -> dict:
    from specdec_cli.cli.options import resolve_paths
    from specdec_cli.session import LoadOptions, open_pair

    draft, target = resolve_paths(args.draft, args.target)
    config = BenchConfig(
        draft_tokens=parse_draft_tokens(args.draft_tokens),
        temperatures=(0.0,),
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        warmup_tokens=16,
        drafters=("model",),  # issue 2 measures the draft model; lookup is issue 6's (specdec bench)
    )
    rss_before = peak_rss_mib()
    with open_pair(draft, target, LoadOptions(n_ctx=args.ctx, n_threads=args.threads)) as pair:
        rss_loaded = peak_rss_mib()
        n_vocab = pair.target.n_vocab

        def progress(done: int, total: int, label: str) -> None:
            print(f"\r[{done}/{total}] {label:<60}", end="", file=sys.stderr, flush=True)

        report = run_bench(pair, [PROMPT], config, progress=progress)
        print(file=sys.stderr)
    cost = report.cost_curves[PROMPT.name]
    rows = []
    for r in report.results:
        k = r.setting.k
        b_runs = [run for run in report.runs if run.step.mode == SPECULATIVE and run.step.setting == r.setting]
        outside_ms = statistics.median(
            1000 * run.stats.python_share * run.stats.generation_seconds / run.stats.target_passes for run in b_runs
        )
        rows.append(
            {
                "k": k,
                "target_tps": r.target_tps.median,
                "speculative_tps": r.speculative_tps.median,
                "speedup": r.speedup.median,
                "speedup_low": r.speedup.low,
                "speedup_high": r.speedup.high,
                "alpha": r.alpha,
                "acceptance_rate": r.acceptance_rate,
                "mean_accepted": r.mean_accepted,
                "draft_step_ms": 1000 * cost.draft_step,
                "target_step_ms": 1000 * cost.target_step,
                "verify_batch_ms": 1000 * cost.target_batch[k],
                "predicted_speedup": r.predicted_speedup,
                "measured_over_predicted": r.measured_over_predicted,
                "python_share": r.python_share,
                "python_ms_per_round": outside_ms,
                "exact": not r.divergences,
            }
        )
    best = max(rows, key=lambda row: row["speedup"])
    model_bytes = draft.stat().st_size + target.stat().st_size
    return {
        "prompt": PROMPT.text,
        "draft": str(draft),
        "target": str(target),
        "threads": args.threads or os.cpu_count(),
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "rows": rows,
        "best_k": best["k"],
        "best_speedup": best["speedup"],
        "floor_met": best["speedup"] >= FLOOR,
        "model_fit_met": all(row["measured_over_predicted"] >= MODEL_FIT for row in rows),
        "memory": {
            "peak_rss_before_load_mib": rss_before,
            "peak_rss_after_load_mib": rss_loaded,
            "peak_rss_end_mib": peak_rss_mib(),
            "model_files_mib": model_bytes / 2**20,
            "ctx": args.ctx,
            "n_vocab": n_vocab,
            "logits_all_buffer_mib": args.ctx * n_vocab * 4 / 2**20,
        },
        "bench_seconds": report.seconds,
    }


def print_table(result: dict) -> None:
    print(f"prompt: {result['prompt']!r}, T=0, {result['max_tokens']} tokens, {result['repeats']} interleaved repeats, {result['threads']} threads")
    head = (
        f"{'k':>3} {'A tok/s':>8} {'B tok/s':>8} {'speed-up (range)':>19} {'alpha':>6} {'draft ms':>8} "
        f"{'T(1) ms':>8} {'T(k+1) ms':>9} {'predicted':>9} {'meas/pred':>9} {'py share':>8} {'py ms/rnd':>9} {'exact':>5}"
    )
    print(head)
    for row in result["rows"]:
        print(
            f"{row['k']:>3} {row['target_tps']:>8.1f} {row['speculative_tps']:>8.1f} "
            f"{row['speedup']:>6.2f} ({row['speedup_low']:.2f}-{row['speedup_high']:.2f}) {row['alpha']:>6.3f} "
            f"{row['draft_step_ms']:>8.2f} {row['target_step_ms']:>8.2f} {row['verify_batch_ms']:>9.2f} "
            f"{row['predicted_speedup']:>9.2f} {row['measured_over_predicted']:>9.2f} {row['python_share']:>8.1%} "
            f"{row['python_ms_per_round']:>9.2f} {'yes' if row['exact'] else 'NO':>5}"
        )
    m = result["memory"]
    print(
        f"best k = {result['best_k']}: {result['best_speedup']:.2f}x (issue 2 floor {FLOOR}x: "
        f"{'met' if result['floor_met'] else 'NOT met'}); measured/predicted >= {MODEL_FIT} at every k: "
        f"{'yes' if result['model_fit_met'] else 'no'}"
    )
    print(
        f"peak RSS: {m['peak_rss_after_load_mib']:.0f} MiB after loading, {m['peak_rss_end_mib']:.0f} MiB at the end "
        f"(model files {m['model_files_mib']:.0f} MiB; an n_ctx x n_vocab float32 logits buffer would add "
        f"{m['logits_all_buffer_mib']:.0f} MiB at ctx {m['ctx']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draft", type=Path, help="draft GGUF (default: the built-in pair)")
    parser.add_argument("--target", type=Path, help="target GGUF")
    parser.add_argument("--draft-tokens", default="4,8,12,16", help="values of k (default 4,8,12,16)")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args()
    result = measure(args)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
