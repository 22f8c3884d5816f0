"""Do the texts under each verify rule follow target-only's law past the first two tokens?

For N seeds, one prompt is decoded target-only, with `--verify token` and with `--verify block`
(the model drafter at a fixed k), n tokens each, on one loaded pair. Compared, each rule against
target-only: the per-sequence mean log p of the emitted tokens (the processed target law),
by Mann-Whitney and Kolmogorov-Smirnov, and the token at two late positions by a two-sample
chi-square (cells under 10 pooled). Also each mode's tokens per target pass over all its runs:
a figure over many texts, where verify_rules.py's few runs per cell see few.

    flock /tmp/llama.lock python3 benchmarks/rule_text_law.py --target ~/.cache/specdec/gemma-3-270m-q4_k_m.F32.gguf -N 300 -n 24 -k 4

Left out: a verdict (the p-values are printed, several tests at once: read them with that in
mind; `specdec audit` is the exactness check with a stated false-failure rate).

Produces docs/benchmarks.md, "Block verification": the texts per rule against target-only's law.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.events import Token  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.prompts import builtin_prompts  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402

MODES = ("target", "token", "block")


def decode(args: argparse.Namespace) -> dict[str, list[dict]]:
    draft, target = builtin_pair()
    params = SamplingParams(temperature=args.temperature, top_k=40, top_p=0.95, min_p=0.05)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with open_pair(draft, args.target or target, LoadOptions(n_ctx=1024)) as pair:
        ids = pair.prompt_tokens(next(p for p in builtin_prompts() if p.name == args.prompt).text, chat=False)
        engines = {"target": pair.engine(speculative=False), "token": pair.engine(), "block": pair.engine()}
        for seed in range(args.N):
            for mode, engine in engines.items():
                config = GenerationConfig(max_tokens=args.n, sampling=params, seed=10_000 + seed, verify="token" if mode == "target" else mode, logprobs=0)
                logprobs: list[float] = []  # consume keeps the ids (Outcome.tokens), not their log p
                outcome = consume(engine.generate(ids, config, None if mode == "target" else draft_policy(args.k)),
                                  lambda e, lp=logprobs: lp.append(e.logprobs.logprob) if isinstance(e, Token) else None)  # fmt: skip
                runs[mode].append({"tokens": outcome.tokens, "logprobs": logprobs, "passes": outcome.stats.target_passes})
    return runs


def late_token_pvalue(a: list[dict], b: list[dict], position: int) -> float:
    x = [r["tokens"][position] for r in a if len(r["tokens"]) > position]
    y = [r["tokens"][position] for r in b if len(r["tokens"]) > position]
    keys = sorted(set(x) | set(y))
    cx, cy = np.array([x.count(t) for t in keys]), np.array([y.count(t) for t in keys])
    big = cx + cy >= 10
    table = np.array([np.r_[cx[big], cx[~big].sum()], np.r_[cy[big], cy[~big].sum()]])
    return float(stats.chi2_contingency(table[:, table.sum(0) > 0])[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="another target for the built-in draft (default: the built-in target)")
    parser.add_argument("-N", type=int, default=300, help="seeds")
    parser.add_argument("-n", type=int, default=24, help="tokens per sequence")
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--prompt", default="summary", help="a built-in prompt's name, sent raw")
    args = parser.parse_args(argv)
    runs = decode(args)
    means = {m: np.array([np.mean(r["logprobs"]) for r in runs[m] if r["logprobs"]]) for m in MODES}
    for mode in MODES:
        per_pass = sum(len(r["tokens"]) for r in runs[mode]) / sum(r["passes"] for r in runs[mode])
        print(f"{mode:>6}: mean log p {means[mode].mean():.4f} (se {means[mode].std() / len(means[mode]) ** 0.5:.4f}), tokens/pass {per_pass:.3f}")
    for mode in ("token", "block"):
        mw = stats.mannwhitneyu(means[mode], means["target"]).pvalue
        ks = stats.ks_2samp(means[mode], means["target"]).pvalue
        late = [late_token_pvalue(runs[mode], runs["target"], pos) for pos in (args.n // 2, args.n - 4)]
        print(f"{mode} vs target-only: mean log p Mann-Whitney p {mw:.3f}, KS p {ks:.3f}; token {args.n // 2} chi2 p {late[0]:.3f}, token {args.n - 4} chi2 p {late[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
