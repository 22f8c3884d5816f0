"""Token rule against block verification on the same loaded pair, side by side.

For each temperature, each prompt of the built-in suite and each seed, one generation with
`--verify token` and one with `--verify block` follow each other (the order alternates), with
the model drafter at a fixed k, so both rules see the same machine state. Reported per
temperature: tokens per target pass (new tokens / target passes, the figure block
verification raises), decode tokens/s, and block over token for both, as medians over the
runs and as the ratio of sums. At temperature 0 both rules are the same code (block falls
back to the token rule), so only T > 0 is measured.

"expect" is block over token in expectation, a figure with far less noise than the sampled
ratio: each block round knows, from its rows, how many of its drafts each rule keeps in
expectation (speculative.expected_kept, reported as Round.block_gain), so
tokens / (tokens - the rounds' summed gain) is block's gain over the token rule on the very
drafts block verified. Under auto it counts auto's block rounds only.

    flock /tmp/llama.lock python3 benchmarks/verify_rules.py --temperatures 0.8,1 -k 4,8 --seeds 4 -n 96
    flock /tmp/llama.lock python3 benchmarks/verify_rules.py --extra 60      # the deepened synthetic target

`--rules token,block,auto` adds `--verify auto` (tuning/rule_choice.py) to each run's rules.
`--extra N` uses synthetic_pair.py's deepened target (the built-in F32 target with N
zero-output blocks: the same text at a realistic cost) instead of the built-in target;
`--target FILE` another target for the built-in draft, e.g. Gemma 3 270M (a pair across
vocabularies whose drafts are accepted far less often):

    flock /tmp/llama.lock python3 benchmarks/verify_rules.py --target ~/.cache/specdec/gemma-3-270m-q4_k_m.F32.gguf --raw

Left out: the bench's A/B against target-only (`specdec bench --verify block` does that for
one rule at a time); other drafters (lookup's drafts are deterministic: block = token).

Produces docs/benchmarks.md, "Block verification": its table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.events import Round  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.prompts import builtin_prompts  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402

RULES = ("token", "block")  # the default --rules; "auto" (tuning/rule_choice.py) may be added


def measure(args: argparse.Namespace) -> list[dict]:
    draft, target = builtin_pair()
    if args.target:
        target = args.target
    elif args.extra:
        from synthetic_pair import deepened_target

        target = deepened_target(args.extra)
    rows = []
    with open_pair(draft, target, LoadOptions(n_ctx=2048)) as pair:
        engine = pair.engine()
        prompts = [(p.name, pair.prompt_tokens(p.text, chat=not args.raw)) for p in builtin_prompts()]
        n = 0
        for temperature in args.temperatures:
            sampling = SamplingParams(temperature=temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
            for k in args.k:
                for name, ids in prompts:
                    for seed in range(args.seeds):
                        order = args.rules if n % 2 == 0 else args.rules[::-1]
                        n += 1
                        for rule in order:
                            config = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling, seed=seed, verify=rule)
                            gain = [0.0]  # block rounds' expected drafts kept beyond the token rule's (Round.block_gain)
                            stats = consume(engine.generate(ids, config, draft_policy(k)), lambda e, g=gain: add_gain(e, g)).stats
                            rows.append({
                                "temperature": temperature, "k": k, "prompt": name, "seed": seed, "verify": rule,
                                "new_tokens": stats.new_tokens, "target_passes": stats.target_passes,
                                "drafted": stats.drafted, "accepted": stats.accepted,
                                "tokens_per_pass": stats.tokens_per_pass, "tokens_per_second": stats.tokens_per_second,
                                "generation_seconds": stats.generation_seconds, "block_gain": gain[0],
                            })  # fmt: skip
    return rows


def add_gain(event, gain: list[float]) -> None:
    if isinstance(event, Round) and event.block_gain is not None:
        gain[0] += event.block_gain


def summary(rows: list[dict]) -> list[dict]:
    """Per (T, k): each rule's tokens per pass and tokens/s, and each other rule over `token`."""
    out = []
    rules = list(dict.fromkeys(r["verify"] for r in rows))
    for temperature, k in sorted({(r["temperature"], r["k"]) for r in rows}):
        by = {rule: [r for r in rows if (r["temperature"], r["k"], r["verify"]) == (temperature, k, rule)] for rule in rules}
        line = {"temperature": temperature, "k": k, "runs": len(by["token"])}
        for rule, rs in by.items():
            line[f"{rule}_tokens_per_pass"] = sum(r["new_tokens"] for r in rs) / sum(r["target_passes"] for r in rs)
            line[f"{rule}_tokens_per_second"] = sum(r["new_tokens"] for r in rs) / sum(r["generation_seconds"] for r in rs)
            line[f"{rule}_median_tokens_per_second"] = statistics.median(r["tokens_per_second"] for r in rs)
        for rule in rules:
            if rule == "token":
                continue
            line[f"{rule}_tokens_per_pass_ratio"] = line[f"{rule}_tokens_per_pass"] / line["token_tokens_per_pass"]
            line[f"{rule}_speed_ratio"] = line[f"{rule}_tokens_per_second"] / line["token_tokens_per_second"]
            tokens = sum(r["new_tokens"] for r in by[rule])
            line[f"{rule}_expected_ratio"] = tokens / (tokens - sum(r["block_gain"] for r in by[rule]))
            pairs = [(b["tokens_per_pass"], t["tokens_per_pass"]) for t, b in zip(by["token"], by[rule])]
            line[f"runs_{rule}_below_token"] = sum(b < t for b, t in pairs)
        out.append(line)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--temperatures", type=lambda s: [float(v) for v in s.split(",")], default=[0.8, 1.0])
    parser.add_argument("-k", type=lambda s: [int(v) for v in s.split(",")], default=[4, 8])
    parser.add_argument("--rules", type=lambda s: tuple(s.split(",")), default=RULES, help="token first, then block and/or auto")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per prompt (each run twice: token and block)")
    parser.add_argument("-n", "--max-tokens", type=int, default=96)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--min-p", type=float, default=0.05)
    parser.add_argument("--extra", type=int, default=0, help="deepen the built-in target by N zero blocks (synthetic_pair.py)")
    parser.add_argument("--target", type=Path, help="another target GGUF for the built-in draft, e.g. Gemma 3 270M at F32 (across vocabularies)")
    parser.add_argument("--raw", action="store_true", help="the prompts as they are, not through the chat template (a target without one)")
    parser.add_argument("--out", type=Path, help="write the runs and the summary as JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = measure(args)
    lines = summary(rows)
    print(f"{'T':>4} {'k':>3} {'runs':>4} {'rule':>6}  {'tok/pass':>8} {'ratio':>6} {'expect':>6}  {'tok/s':>6} {'ratio':>6}  below token")
    for l in lines:
        for rule in args.rules:
            ratios = f"{l[rule + '_tokens_per_pass_ratio']:>6.3f}" if rule != "token" else " " * 6
            speed = f"{l[rule + '_speed_ratio']:>6.3f}" if rule != "token" else " " * 6
            expected = f"{l[rule + '_expected_ratio']:>6.3f}" if rule != "token" else " " * 6
            below = f"{l['runs_' + rule + '_below_token']}/{l['runs']}" if rule != "token" else ""
            print(f"{l['temperature']:>4g} {l['k']:>3} {l['runs']:>4} {rule:>6}  {l[rule + '_tokens_per_pass']:>8.3f} {ratios} {expected}  "
                  f"{l[rule + '_tokens_per_second']:>6.1f} {speed}  {below}")  # fmt: skip
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"}, "summary": lines, "runs": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
