"""Measure speculative decoding at realistic cost ratios with synthetic targets.

The built-in pair is one model at two precisions, so its draft step costs 42-62% of a target
step. This script builds targets of a chosen cost (synthetic_gguf.py writes the files) and
measures the engine on them, honestly labelled:

    # the built-in F32 target with N extra zero-output blocks: same text, N more blocks to read
    flock /tmp/specdec-cpu.lock python3 benchmarks/synthetic_pair.py identity --extra 2
    flock /tmp/specdec-cpu.lock python3 benchmarks/synthetic_pair.py sweep --extra 0,60,100,160 \\
        --json docs/synthetic.json --plot docs/synthetic.png
    # a random pair of a given shape: real costs, meaningless text
    flock /tmp/specdec-cpu.lock python3 benchmarks/synthetic_pair.py random --draft-shape tiny-draft --target-shape tiny-target
    python3 benchmarks/synthetic_pair.py plot docs/synthetic.png docs/synthetic.json   # re-plot saved rows

- `identity`: a deepened target with eps = 0 must give exactly the base model's greedy output
  (target-only decoding of each, token for token); exit code 1 if it does not.
- `sweep`: for each N, the built-in Q4_1 draft against the base F32 target deepened by N
  blocks (eps = 0 keeps the built-in pair's agreement; --eps lowers it): `specdec bench`'s
  measurement (bench.run.run_bench, model drafter, T = 0, A/B interleaved) on the suite's prose
  prompts, after the identity check above for that N (eps = 0), reduced to one row per N: the target step T(1), c = draft step / T(1), alpha, the
  speed-up of the best fixed k and of `auto`, and Theorem 3.8's prediction at that k
  (stats.predict). Example (measured on the 2-core machine, docs/benchmarks.md): N = 60,
  T(1) = 59 ms, c = 0.17, alpha = 0.971, best k = 12: 2.29x measured, 2.21x predicted.
- `random`: a random draft and target of the given shapes (synthetic_gguf.SHAPES or
  --hidden/--layers/... overrides): acceptance between random models means nothing, so it
  reports the measured cost curve T(n), the draft step, and the speed-up Theorem 3.8 predicts
  from them for a range of acceptance rates (best k for each), not a measured speed-up. The
  costs are timed at the end of a short prompt: over a long text every step costs more, the
  verify batch and the draft step most (cost_curve.mid_generation).

Files go to specdec's cache directory (registry.cache_dir(): $SPECDEC_CACHE, ...), written
atomically, and are reused when present.

Left out: the GGUF writing (synthetic_gguf.py), the A/B measurement itself (bench/run.py), the GPU
run (gpu_check.sh / gpu_check.py).

Produces docs/benchmarks.md, "Realistic cost ratios: deepened targets" (docs/synthetic.json, .png), its "Agreement falling" paragraph (docs/synthetic-eps.json) and the random target in "What the cost model predicts" (docs/synthetic-random-cpu.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import specdec_cli  # noqa: E402,F401  before numpy (gguf, synthetic_gguf): see specdec_cli/__init__.py
import synthetic_gguf as sg  # noqa: E402

from specdec_cli.bench.run import run_bench  # noqa: E402
from specdec_cli.bench.model import BenchConfig  # noqa: E402
from specdec_cli.bench.stats import first_divergence  # noqa: E402
from specdec_cli.options import parse_draft_tokens  # noqa: E402
from specdec_cli.tuning.cost_curve import CostCurve, measure_cost_curve  # noqa: E402
from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.errors import ModelNotFound  # noqa: E402
from specdec_cli.events import AUTO  # noqa: E402
from specdec_cli.prompts import BUILTIN_PROMPTS, Prompt  # noqa: E402
from specdec_cli.models.cache import builtin_draft_path, builtin_pair, cache_dir  # noqa: E402
from specdec_cli.maths.sampling import GREEDY  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402
from specdec_cli.tuning.speedup import predict

PROSE = ("chat", "story")  # the suite's free-prose prompts (the others are code, lists, copies)
ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
Notify = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# -- files -----------------------------------------------------------------------------------


def deepened_target(extra: int, eps: float = 0.0, base: Path | None = None, directory: Path | None = None, notify: Notify = _quiet) -> Path:
    """The base F32 target (default: the built-in one) with `extra` blocks, written once into the cache."""
    base = base or builtin_pair()[1]
    if extra == 0 and eps == 0:
        return base
    dst = (directory or cache_dir()) / sg.deepened_name(base, extra, eps)
    if not dst.exists():
        notify(f"writing {dst} ...")
        sg.write_deepened(base, dst, extra, eps)
    return dst


def random_model(shape: sg.Shape, seed: int, directory: Path | None = None, notify: Notify = _quiet) -> Path:
    """A random model of `shape`, written once into the cache. Reuses the built-in tokenizer when the vocabulary matches."""
    name = f"random-h{shape.hidden}-l{shape.layers}-a{shape.heads}-kv{shape.kv_heads}-f{shape.ffn}-v{shape.vocab}-{shape.quant}-s{seed}.gguf"
    dst = (directory or cache_dir()) / name
    if not dst.exists():
        notify(f"writing {dst} ...")
        tokenizer = None
        try:
            builtin = sg.tokenizer_fields(builtin_draft_path())
            if sg.vocab_size(builtin) == shape.vocab:
                tokenizer = builtin
        except ModelNotFound:  # no built-in model here (e.g. the GPU machine): the minimal tokenizer
            pass
        sg.write_random(dst, shape, seed, tokenizer)
    return dst


# -- the eps = 0 identity check ----------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    base_tokens: tuple[int, ...]
    deepened_tokens: tuple[int, ...]

    @property
    def divergence(self) -> int | None:
        return first_divergence(self.base_tokens, self.deepened_tokens)


def greedy_tokens(target: Path, prompt: str, max_tokens: int, options: LoadOptions) -> tuple[int, ...]:
    """Target-only greedy decoding of `prompt` (chat template) on one model."""
    with open_pair(None, target, options) as pair:
        ids = pair.prompt_tokens(prompt)
        tokens = consume(pair.engine(speculative=False).generate(ids, GenerationConfig(max_tokens=max_tokens, sampling=GREEDY))).tokens
    return tuple(tokens)


def check_identity(base: Path, deepened: Path, prompt: str, max_tokens: int = 32, options: LoadOptions = LoadOptions()) -> Identity:
    return Identity(greedy_tokens(base, prompt, max_tokens, options), greedy_tokens(deepened, prompt, max_tokens, options))


# -- the sweep over N ---------------------------------------------------------------------------


@dataclass
class DeepRow:
    """One deepened target against the built-in draft, reduced over the prose prompts at T = 0."""

    extra: int
    eps: float
    layers: int
    target_mib: float
    draft_step_ms: float
    target_step_ms: float  # T(1)
    cost_ratio: float  # c = draft step / T(1)
    verify_ms: dict[int, float]  # T(k + 1) at each fixed k
    alpha: float  # at the best fixed k, pooled over prompts
    acceptance_rate: float
    best_k: int
    best_speedup: float  # geometric mean over prompts of the per-prompt median A/B speed-ups
    best_range: tuple[float, float]  # lowest and highest prompt
    predicted: float  # Theorem 3.8 at best_k from this run's alpha and costs (geometric mean over prompts)
    auto_speedup: float
    speedups: dict[str, float]  # k -> measured
    predictions: dict[str, float]
    exact: bool  # every speculative run at T = 0 gave exactly its target-only tokens
    seconds: float
    identical_to_base: bool | None  # eps = 0: greedy text equals the base model's (None: not checked, eps > 0 or N = 0)

    @property
    def measured_over_predicted(self) -> float:
        return self.best_speedup / self.predicted if self.predicted else math.nan

    @property
    def auto_over_best(self) -> float:
        return self.auto_speedup / self.best_speedup if self.best_speedup else math.nan


def measure_deepened(
    extra: int, eps: float, config: BenchConfig, prompts: Sequence[Prompt], options: LoadOptions, notify: Notify = _quiet
) -> DeepRow:
    draft, base = builtin_pair()
    target = deepened_target(extra, eps, base, notify=notify)
    layers = int(sg.gguf.GGUFReader(target).fields["llama.block_count"].contents())
    identical = None
    if eps == 0 and target != base:
        notify(f"N = {extra}: checking that the deepened target's greedy text is the base model's ...")
        identical = check_identity(base, target, prompts[0].text, 32, options).divergence is None
    notify(f"N = {extra}: {layers} blocks, {target.stat().st_size / 2**20:.0f} MiB; measuring ...")
    with open_pair(draft, target, options) as pair:
        report = run_bench(pair, prompts, config, models={"draft": str(draft), "target": str(target)})
    rows = {row.k: row for row in report.summary if row.temperature == 0 and row.drafter == "model"}
    fixed = [k for k in rows if k != AUTO]
    best = max(fixed, key=lambda k: rows[k].speedup)
    curves = list(report.cost_curves.values())
    draft_step = _median(c.draft_step for c in curves)
    target_step = _median(c.target_step for c in curves)
    return DeepRow(
        extra=extra,
        eps=eps,
        layers=layers,
        target_mib=target.stat().st_size / 2**20,
        draft_step_ms=1000 * draft_step,
        target_step_ms=1000 * target_step,
        cost_ratio=draft_step / target_step,
        verify_ms={k: 1000 * _median(c.target_batch[k] for c in curves) for k in fixed},
        alpha=rows[best].alpha,
        acceptance_rate=rows[best].acceptance_rate,
        best_k=best,
        best_speedup=rows[best].speedup,
        best_range=(rows[best].speedup_low, rows[best].speedup_high),
        predicted=rows[best].predicted_speedup,
        auto_speedup=rows[AUTO].speedup if AUTO in rows else math.nan,
        speedups={str(k): row.speedup for k, row in rows.items()},
        predictions={str(k): rows[k].predicted_speedup for k in fixed},
        exact=not report.divergences,
        seconds=report.seconds,
        identical_to_base=identical,
    )


def _median(values) -> float:
    values = sorted(values)
    n = len(values)
    return (values[n // 2] + values[(n - 1) // 2]) / 2


# -- the random pair: costs and predictions ----------------------------------------------------


@dataclass
class CostReport:
    draft: str
    target: str
    draft_params: int
    target_params: int
    draft_step_ms: float
    target_batch_ms: list[float]  # T(n), n = 1..len
    cost_ratio: float
    predictions: list[dict]  # per alpha: the best k and its predicted speed-up


def predictions(cost: CostCurve, alphas: Sequence[float]) -> list[dict]:
    """For each alpha, the fixed k (1..len(curve) - 1) that Theorem 3.8 predicts fastest, and its speed-up.

    Example: draft 2 ms, T(n) = 20 ms + 0.5 ms x n (n = 1..16), alpha = 0.8 -> k = 5 (2.29x).
    """
    out = []
    for alpha in alphas:
        by_k = {k: predict(alpha, k, cost) for k in range(1, len(cost.target_batch))}
        best = max(by_k, key=by_k.get)
        out.append({"alpha": alpha, "best_k": best, "predicted_speedup": by_k[best]})
    return out


def cost_report(draft: Path, target: Path, shapes: tuple[sg.Shape, sg.Shape], options: LoadOptions, max_batch: int = 16,
                alphas: Sequence[float] = ALPHAS, repeats: int = 5) -> CostReport:
    with open_pair(draft, target, options) as pair:
        ids = pair.prompt_tokens(BUILTIN_PROMPTS[1].text)
        cost = measure_cost_curve(pair.target, pair.draft, ids, max_batch, repeats)
    return CostReport(
        draft=str(draft),
        target=str(target),
        draft_params=shapes[0].parameters,
        target_params=shapes[1].parameters,
        draft_step_ms=1000 * cost.draft_step,
        target_batch_ms=[1000 * t for t in cost.target_batch],
        cost_ratio=cost.draft_step / cost.target_step,
        predictions=predictions(cost, alphas),
    )


# -- output -------------------------------------------------------------------------------------


def print_sweep(rows: Sequence[DeepRow], config: BenchConfig, prompts: Sequence[Prompt]) -> None:
    print(
        f"built-in Q4_1 draft vs deepened F32 target, prompts {','.join(p.name for p in prompts)}, T = 0, "
        f"{config.max_tokens} tokens, {config.repeats} interleaved repeats, k in {','.join(map(str, config.draft_tokens))}"
    )
    print(f"{'N':>4} {'layers':>6} {'MiB':>6} {'draft ms':>8} {'T(1) ms':>8} {'c':>5} {'alpha':>6} {'best k':>6} "
          f"{'speed-up (range)':>18} {'predicted':>9} {'meas/pred':>9} {'auto':>5} {'auto/best':>9} {'exact':>5} {'=base':>5}")
    for r in rows:
        print(
            f"{r.extra:>4} {r.layers:>6} {r.target_mib:>6.0f} {r.draft_step_ms:>8.2f} {r.target_step_ms:>8.2f} {r.cost_ratio:>5.2f} "
            f"{r.alpha:>6.3f} {r.best_k:>6} {r.best_speedup:>6.2f} ({r.best_range[0]:.2f}-{r.best_range[1]:.2f}) "
            f"{r.predicted:>9.2f} {r.measured_over_predicted:>9.2f} {r.auto_speedup:>5.2f} {r.auto_over_best:>9.2f} "
            f"{'yes' if r.exact else 'NO':>5} {'-' if r.identical_to_base is None else 'yes' if r.identical_to_base else 'NO':>5}"
        )


def write_plot(rows: Sequence[DeepRow], path: Path) -> None:
    """Speed-up against c: measured at the best fixed k (bars: lowest-highest prompt) and with auto,
    and Theorem 3.8's prediction at that k from the same run's alpha and costs."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    rows = sorted(rows, key=lambda r: r.cost_ratio)
    c = [r.cost_ratio for r in rows]
    ax.plot(c, [r.predicted for r in rows], "k--", marker="x", label="Theorem 3.8 at that k (predicted)")
    below = [r.best_speedup - r.best_range[0] for r in rows]
    above = [r.best_range[1] - r.best_speedup for r in rows]
    ax.errorbar(c, [r.best_speedup for r in rows], yerr=[below, above], fmt="o", color="C0", capsize=3,
                label="measured, best fixed k (range over prompts)")
    ax.plot(c, [r.auto_speedup for r in rows], "s", color="C1", label="measured, auto")
    for r in rows:
        ax.annotate(f"N={r.extra}, k={r.best_k}", (r.cost_ratio, r.best_speedup), textcoords="offset points", xytext=(6, -3), fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("c = draft step / target step")
    ax.set_ylabel("speed-up over target-only (T = 0)")
    ax.set_title("Built-in Q4_1 draft vs F32 target deepened by N zero-output blocks")
    ax.legend()
    fig.savefig(path, dpi=110)


def rows_from_json(path: Path) -> list[DeepRow]:
    """The rows a `sweep --json` wrote (to plot several runs together)."""
    rows = []
    for raw in json.loads(path.read_text())["rows"]:
        raw["best_range"] = tuple(raw["best_range"])
        raw["verify_ms"] = {int(k): v for k, v in raw["verify_ms"].items()}
        rows.append(DeepRow(**raw))
    return rows


def print_costs(report: CostReport) -> None:
    print(f"draft  {report.draft} ({report.draft_params / 1e9:.2f}B parameters)")
    print(f"target {report.target} ({report.target_params / 1e9:.2f}B parameters)")
    print(f"draft step {report.draft_step_ms:.2f} ms; c = {report.cost_ratio:.3f}")
    print("T(n) ms: " + " ".join(f"{n}:{t:.2f}" for n, t in enumerate(report.target_batch_ms, 1)))
    print("acceptance is not measured (random models); predicted speed-up at the best k for each alpha:")
    for p in report.predictions:
        print(f"  alpha {p['alpha']:.2f}: k = {p['best_k']:>2}, {p['predicted_speedup']:.2f}x")


def shape_from_args(args: argparse.Namespace, prefix: str) -> sg.Shape:
    base = sg.SHAPES[getattr(args, f"{prefix}_shape")]
    changes = {k: getattr(args, f"{prefix}_{k}") for k in ("hidden", "layers", "heads", "kv_heads", "ffn") if getattr(args, f"{prefix}_{k}")}
    if args.vocab:
        changes["vocab"] = args.vocab
    if args.quant:
        changes["quant"] = args.quant
    return dataclasses.replace(base, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ident = sub.add_parser("identity", help="eps = 0: deepened target's greedy output == base model's")
    ident.add_argument("--extra", type=int, default=2)
    ident.add_argument("-n", "--max-tokens", type=int, default=32)
    sweep = sub.add_parser("sweep", help="speed-up against c over deepened targets")
    sweep.add_argument("--extra", default="0,60,100,160", help="values of N, comma-separated")
    sweep.add_argument("--eps", type=float, default=0.0)
    sweep.add_argument("--prompts", default=",".join(PROSE), help="names from the built-in suite")
    sweep.add_argument("--draft-tokens", default="8,12,16,auto")
    sweep.add_argument("--repeats", type=int, default=2)
    sweep.add_argument("-n", "--max-tokens", type=int, default=128)
    sweep.add_argument("--json", type=Path, help="write the rows as JSON here")
    sweep.add_argument("--plot", type=Path, help="write speed-up against c as a PNG here")
    plot = sub.add_parser("plot", help="plot the rows of one or more `sweep --json` files")
    plot.add_argument("png", type=Path)
    plot.add_argument("inputs", type=Path, nargs="+")
    rand = sub.add_parser("random", help="cost curve and predicted speed-ups of a random pair")
    for prefix, default in (("draft", "0.5b"), ("target", "7b")):
        rand.add_argument(f"--{prefix}-shape", default=default, choices=sorted(sg.SHAPES))
        for key in ("hidden", "layers", "heads", "kv-heads", "ffn"):
            rand.add_argument(f"--{prefix}-{key}", type=int)
    rand.add_argument("--vocab", type=int, help="vocabulary size of both (default: the shapes')")
    rand.add_argument("--quant", choices=sorted(sg.QUANTS), help="quantization of both (default: the shapes')")
    rand.add_argument("--seed", type=int, default=0)
    rand.add_argument("--max-batch", type=int, default=16)
    rand.add_argument("--json", type=Path)
    for p in (ident, sweep, rand, plot):
        p.add_argument("--ctx", type=int, default=2048)
        p.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    options = LoadOptions(n_ctx=args.ctx, n_threads=args.threads)

    def notify(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.command == "identity":
        base = builtin_pair()[1]
        deepened = deepened_target(args.extra, 0.0, base, notify=notify)
        result = check_identity(base, deepened, BUILTIN_PROMPTS[4].text, args.max_tokens, options)
        where = result.divergence
        print(f"{deepened.name}: {len(result.deepened_tokens)} greedy tokens, "
              + ("identical to the base model's" if where is None else f"DIFFERENT from the base model's at token {where}"))
        return 0 if where is None else 1
    if args.command == "plot":
        write_plot([row for path in args.inputs for row in rows_from_json(path)], args.png)
        return 0
    if args.command == "sweep":
        by_name = {p.name: p for p in BUILTIN_PROMPTS}
        prompts = [by_name[name] for name in args.prompts.split(",")]
        config = BenchConfig(
            draft_tokens=parse_draft_tokens(args.draft_tokens), drafters=("model",), temperatures=(0.0,),
            max_tokens=args.max_tokens, repeats=args.repeats,
        )
        rows = [measure_deepened(int(n), args.eps, config, prompts, options, notify) for n in args.extra.split(",")]
        print_sweep(rows, config, prompts)
        if args.json:
            args.json.write_text(json.dumps({"config": dataclasses.asdict(config), "prompts": [p.name for p in prompts],
                                             "rows": [dataclasses.asdict(r) for r in rows]}, indent=1) + "\n")
        if args.plot:
            write_plot(rows, args.plot)
        return 0 if all(r.exact and r.identical_to_base is not False for r in rows) else 1
    shapes = (shape_from_args(args, "draft"), shape_from_args(args, "target"))
    draft = random_model(shapes[0], args.seed, notify=notify)
    target = random_model(shapes[1], args.seed + 1, notify=notify)
    report = cost_report(draft, target, shapes, options, args.max_batch)
    print_costs(report)
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(report), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
