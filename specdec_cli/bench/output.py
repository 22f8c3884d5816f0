"""The bench's files: one CSV row per run, and the whole report as one JSON object.

    write_csv(report, open("runs.csv", "w", newline=""))   # columns CSV_COLUMNS
    json.dumps(report_dict(report))                         # schema SCHEMA, NaN written as null

Left out: the tables and plot on screen (bench/render.py), which file to write (cli/bench.py).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict
from typing import TextIO

from .model import BenchReport, RunRecord, SettingResult
from .render import recommendation_line

SCHEMA = "specdec-bench/2"  # 2: settings carry a drafter, and k may be "auto"


def report_dict(report: BenchReport) -> dict:
    """The whole report, JSON-ready (no NaN: see _finite)."""
    return _finite(
        {
            "schema": SCHEMA,
            "config": asdict(report.config),
            "models": report.models,
            "prompts": [asdict(p) for p in report.prompts],
            "seconds": report.seconds,
            "exact": not report.divergences,
            "recommendation": {**asdict(report.recommendation), "line": recommendation_line(report.recommendation)},
            "summary": [asdict(row) for row in report.summary],
            "results": [_result_dict(r) for r in report.results],
            "cost_curves": {
                name: {"draft_step": c.draft_step, "target_batch": list(c.target_batch)} for name, c in report.cost_curves.items()
            },
            "divergences": [asdict(d) for d in report.divergences],
            "runs": [_run_dict(run) for run in report.runs],
        }
    )


CSV_COLUMNS = (
    "repeat",
    "prompt",
    "temperature",
    "drafter",
    "k",
    "mode",
    "new_tokens",
    "generation_seconds",
    "wall_seconds",
    "tokens_per_second",
    "target_passes",
    "drafted",
    "accepted",
    "acceptance_rate",
    "alpha",
    "mean_accepted",
    "mean_k",
    "python_share",
    "finish_reason",
    "divergence_position",
)


def csv_rows(report: BenchReport) -> list[dict]:
    """One row per run (every measurement), with the columns of CSV_COLUMNS."""
    rows = []
    for run in report.runs:
        s, stats, nat = run.step.setting, run.stats, run.native
        row = {
            "repeat": run.step.repeat + 1,
            "prompt": s.prompt,
            "temperature": s.temperature,
            "drafter": s.drafter,
            "k": s.k,
            "mode": run.step.mode,
            "new_tokens": run.new_tokens,
            "generation_seconds": run.generation_seconds,
            "wall_seconds": run.wall_seconds,
            "tokens_per_second": run.tokens_per_second,
            "target_passes": stats.target_passes if stats else "",
            "drafted": stats.drafted if stats else (nat.n_drafted if nat and nat.n_drafted is not None else ""),
            "accepted": stats.accepted if stats else (nat.n_accept if nat and nat.n_accept is not None else ""),
            "acceptance_rate": stats.acceptance_rate if stats else (nat.acceptance_rate if nat and nat.acceptance_rate is not None else ""),
            "alpha": stats.alpha if stats else "",
            "mean_accepted": stats.mean_accepted if stats else "",
            "mean_k": stats.mean_k if stats else "",
            "python_share": stats.python_share if stats else "",
            "finish_reason": stats.finish_reason if stats else "",
            "divergence_position": "" if run.divergence is None else run.divergence,
        }
        rows.append(row)
    return rows


def write_csv(report: BenchReport, out: TextIO) -> None:
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(csv_rows(report))


def _result_dict(r: SettingResult) -> dict:
    out = asdict(r)
    out["measured_over_predicted"] = r.measured_over_predicted
    return out


def _run_dict(run: RunRecord) -> dict:
    return {
        "repeat": run.step.repeat + 1,
        **asdict(run.step.setting),
        "mode": run.step.mode,
        "new_tokens": run.new_tokens,
        "generation_seconds": run.generation_seconds,
        "wall_seconds": run.wall_seconds,
        "tokens_per_second": run.tokens_per_second,
        "divergence_position": run.divergence,
        "stats": run.stats.to_dict() if run.stats else None,
        "native": run.native.to_dict() if run.native else None,
        "tokens": list(run.tokens),
    }


def _finite(value):
    """JSON has no NaN or infinity: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else str(k)): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
