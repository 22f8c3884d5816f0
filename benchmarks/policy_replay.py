"""Replay a draft-length policy on recorded agreement and measured costs, on a simulated clock.

At temperature 0 a round's outcome does not depend on the policy: the draft model's token at
each output position, given the true prefix, either is the target's greedy token or is not,
so one boolean per position (the agreement trace) decides how many drafts any round of any k
accepts: the run of agreements from where the round starts. With a cost model (the target's
T(n), the draft step), every policy can be replayed round by round without a model, and `auto`
compared with each fixed k on the same text, free of timing noise:

    # once, with the built-in pair (llama.cpp, a minute on 2 cores): the traces
    flock /tmp/specdec-cpu.lock python3 benchmarks/policy_replay.py record --json benchmarks/agreement_traces.json
    # then, no model: auto against k = 1..16 with the costs a sweep measured
    python3 benchmarks/policy_replay.py compare --costs docs/synthetic.json
    python3 benchmarks/policy_replay.py compare --costs docs/synthetic.json --before 896be39   # and the code at a ref
    python3 benchmarks/policy_replay.py compare --costs docs/synthetic.json --shifts 16   # starts 0, 2, .., 30
    python3 benchmarks/policy_replay.py compare --costs docs/synthetic.json --random 64   # random texts
    python3 benchmarks/policy_replay.py compare --curve 0.015,0.15 --curve 1,0.2 --random 64   # curves of other machines
    python3 benchmarks/policy_replay.py compare --curve 0.015,0.15 --random 64 --oracle-costs   # auto told the costs
    python3 benchmarks/policy_replay.py compare --costs OUT/gpu_check.json --random 64   # a GPU's measured curve
    python3 benchmarks/policy_replay.py compare --costs benchmarks/rpc10_costs.json --first-pass 50 --random 64   # RPC at 10 ms

Where the rejections fall relative to the round boundaries moves every fixed k by several
per cent, so one text is a lucky or unlucky draw; `--shifts S` replays each text from S
starts (tokens 0.., 2.., .., 2(S - 1)..) and prints the mean, lowest and highest of auto /
best fixed k on the grid. Shifting moves only the first round boundary, though: after a
rejection every policy starts a round at the same token, so the gaps between rejections
decide the rest, and one text's gaps can suit one k (on `chat` k = 12 is the best of 8, 12,
16 from all 16 starts). `--random R` replays R random texts per prompt instead, each
position a miss independently at the prompt's own rate (Theorem 3.8's model), and also
prints auto against the fixed k that is best on average over them.

The cost model (`Costs`): a plain step costs T(1), a round of k drafts costs its draft steps
plus T(k + 1), with T(n) interpolated linearly between measured sizes, and the first pass at
each size beyond 1 costs --first-pass ms more (over RPC; 0 by default); the draft model's
catch-up at the start of a round evaluates the tokens it has not seen (one after a
rejection, two after a fully accepted round, more after plain steps) and is charged
T_draft x (1 + s (m - 1)) for m tokens, s = 0.1 by default (an assumption: a small batch
costs little more than one step; `--catch-up S` sets it: over RPC on 2 cores a catch-up after
eight plain steps took some 0.25 of a step per token). Python time per round is left out.
Example: T(1) = 92 ms, T(13) = 251 ms, draft 10 ms; a k = 12 round after a rejection whose
first 5 drafts agree costs 10 + 11 x 10 + 251 = 371 ms and yields 6 tokens. The sizes come
from a sweep's JSON or a GPU check's (--costs), or from a line (--curve SLOPE,C:
`Costs.linear`) for machines neither ran on.

The policy sees exactly what the engine would hand it (events.Round with k, drafted,
accepted, seconds, draft seconds, catch-up seconds), so what it learns is what it would
learn in a real run; only the clock is simulated.

Left out: real timing (bench/run.py, synthetic_pair.py sweep), T > 0 (a trace then depends on the
random draws), the lookup drafter.

Produces docs/auto.md, "`-k auto` against the best fixed k": its table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
# --before runs this script again with an older specdec_cli first on the path (SPECDEC_CODE).
sys.path.insert(0, os.environ.get("SPECDEC_CODE", str(ROOT)))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from specdec_cli.tuning.cost_curve import CostCurve  # noqa: E402
from specdec_cli.events import Round  # noqa: E402
from specdec_cli.tuning.adaptive import AdaptivePolicy  # noqa: E402
from specdec_cli.tuning.policy import FixedPolicy  # noqa: E402

TRACES = Path(__file__).resolve().parent / "agreement_traces.json"
CATCH_UP_PER_TOKEN = 0.1  # extra catch-up tokens cost this share of a draft step each (--catch-up)


@dataclass(frozen=True)
class Costs:
    """Seconds: the draft step, and the target's T(n) at some measured sizes (n = 1 required)."""

    draft_step: float
    target: dict[int, float]  # n -> T(n)
    label: str = ""
    first_pass: float = 0.0  # what a size's first pass in a call costs beyond T(n) (over RPC: docs/rpc.md)
    catch_up_share: float = CATCH_UP_PER_TOKEN  # what each catch-up token beyond the first costs, in draft steps

    def batch(self, n: int) -> float:
        """T(n), linear between the measured sizes around n (beyond the largest: its last slope).

        Example: T(1) = 0.092, T(9) = 0.206 -> T(5) = 0.149."""
        sizes = sorted(self.target)
        if n in self.target:
            return self.target[n]
        lower = max((s for s in sizes if s < n), default=sizes[0])
        upper = min((s for s in sizes if s > n), default=None)
        if upper is None:  # extrapolate with the slope of the last two sizes
            lower, upper = sizes[-2], sizes[-1]
        slope = (self.target[upper] - self.target[lower]) / (upper - lower)
        return self.target[lower] + slope * (n - lower)

    @classmethod
    def linear(cls, spec: str) -> "Costs":
        """A cost model no sweep measured, from "SLOPE,C": T(n) = T(1) (1 + SLOPE (n - 1)) and a
        draft step of C x T(1), T(1) = 100 ms (the choices and every ratio printed are the same
        for any T(1)). For the curves of other machines: a GPU's nearly flat one, or a CPU
        target whose batch costs a whole step more per token. Example: "0.015,0.15" -> T(1) =
        100 ms, T(9) = 112 ms, draft step 15 ms."""
        slope, c = (float(v) for v in spec.split(","))
        t1 = 0.1
        return cls(c * t1, {1: t1, 2: t1 * (1.0 + slope)}, label=f"s={slope:g} c={c:g}")

    def catch_up(self, tokens: int) -> float:
        return self.draft_step * (1.0 + self.catch_up_share * (max(tokens, 1) - 1))


@dataclass
class Replay:
    tokens: int = 0
    seconds: float = 0.0
    rounds: list[Round] = field(default_factory=list)  # what the policy observed

    @property
    def ks(self) -> list[int]:
        return [r.k for r in self.rounds]

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def replay(agrees: Sequence[bool], policy, costs: Costs, max_tokens: int) -> Replay:
    """Run `policy` for max_tokens tokens (at most the trace's length) of the text behind `agrees`,
    as a fresh process would: the first pass at each size but 1 (which llama.cpp reserves at load)
    costs `costs.first_pass` more."""
    n = min(max_tokens, len(agrees))
    out = Replay()
    ran = {1}  # the sizes this call has run
    pos = 0  # tokens emitted so far
    seen = 0  # tokens the draft model has evaluated (its cache after catching up)
    while pos < n:
        name, k = policy.choose(["model"], n - pos - 1)  # a round makes up to k + 1 tokens
        if k == 0:
            seconds = costs.batch(1)
            event = Round(0, 0, 0.0, 0.0, seconds, seconds, drafter="", k=0)
            pos += 1
        else:
            accepted = 0
            while accepted < k and agrees[pos + accepted]:
                accepted += 1
            catch_up = costs.catch_up(pos - seen)
            draft = catch_up + (k - 1) * costs.draft_step
            verify = costs.batch(k + 1) + (0.0 if k + 1 in ran else costs.first_pass)
            ran.add(k + 1)
            event = Round(k, accepted, draft, draft, verify, draft + verify, drafter=name, draft_catch_up_seconds=catch_up, k=k)
            pos += accepted + 1
            # The draft model evaluated the context and d_1..d_(k-1): after a rejection it lacks
            # the correction, after a fully accepted round d_k and the bonus.
            seen = pos - (1 if accepted < k else 2)
        out.rounds.append(event)
        out.seconds += event.seconds
        policy.observe(event)
    out.tokens = pos
    return out


def costs_from_json(path: Path, draft_scale: float = 1.0) -> list[Costs]:
    """The measured costs in a `synthetic_pair.py sweep --json` file (one per row), or in a
    `gpu_check.sh` run's gpu_check.json (T(n) for n = 1..16 and the draft step: the curve of
    the machine it ran on), the draft step multiplied by draft_scale (a dearer draft model on
    the same target)."""
    data = json.loads(path.read_text())
    if "rows" not in data:
        cost = data["cost"]
        draft = cost["draft_step_ms"] / 1000 * draft_scale
        target = {n: ms / 1000 for n, ms in enumerate(cost["target_batch_ms"], start=1)}
        return [Costs(draft, target, label=f"gpu_check c={draft / target[1]:.2f}")]
    out = []
    for row in data["rows"]:
        target = {1: row["target_step_ms"] / 1000}
        target.update({int(k) + 1: ms / 1000 for k, ms in row["verify_ms"].items()})
        draft = row["draft_step_ms"] / 1000 * draft_scale
        out.append(Costs(draft, target, label=f"N={row['extra']} c={draft / target[1]:.2f}"))
    return out


# -- record (needs the built-in pair) ------------------------------------------------------------


def record(max_tokens: int) -> dict[str, str]:
    """Per built-in prompt, for each of the target's greedy tokens: "1" if the draft's argmax
    given the same prefix (one batch over the whole text) is that token, else "0"."""
    import numpy as np

    from specdec_cli.decoding.engine import GenerationConfig
    from specdec_cli.prompts import BUILTIN_PROMPTS
    from specdec_cli.models.cache import builtin_pair
    from specdec_cli.maths.sampling import GREEDY
    from specdec_cli.session import LoadOptions, open_pair
    from specdec_cli.decoding.consume import consume

    out = {}
    with open_pair(*builtin_pair(), LoadOptions(n_ctx=2048)) as pair:
        for prompt in BUILTIN_PROMPTS:
            ids = pair.prompt_tokens(prompt.text)
            tokens = list(consume(pair.engine(speculative=False).generate(ids, GenerationConfig(max_tokens=max_tokens, sampling=GREEDY))).tokens)
            pair.draft.rewind(0)
            rows = pair.draft.decode(ids + tokens[:-1], len(tokens))
            guesses = np.argmax(rows[:, : pair.vocab_limit], axis=1)
            pair.draft.rewind(0)
            out[prompt.name] = "".join("1" if g == t else "0" for g, t in zip(guesses, tokens))
    return out


# -- compare ----------------------------------------------------------------------------------------


def load_traces(path: Path = TRACES) -> dict[str, list[bool]]:
    return {name: [c == "1" for c in text] for name, text in json.loads(path.read_text()).items()}


def compare(traces: dict[str, list[bool]], costs: Sequence[Costs], max_tokens: int, max_k: int = 16,
            oracle_costs: bool = False, second_call: bool = False) -> list[dict]:
    """For each cost model and prompt: tokens/s of target-only, of every fixed k in 1..max_k, and of
    auto; with oracle_costs, auto is handed the true costs and does not learn them (so what is
    left of its gap is the price of learning acceptance). With second_call, auto's figures are
    those of a second call, which starts from what a first call on the text before (the last
    one's, for the first text) learnt, as `specdec run`'s tuning record hands it on."""
    rows = []
    for cost in costs:
        true_curve = CostCurve(cost.draft_step, tuple(cost.batch(n) for n in range(1, max_k + 2)))
        names = list(traces)
        for i, (name, agrees) in enumerate(traces.items()):
            fixed = {k: replay(agrees, FixedPolicy(k), cost, max_tokens).tokens_per_second for k in range(1, max_k + 1)}
            # As `specdec run` over RPC, auto starts from the first passes' cost as the link's round trip
            # predicts it (llama/rpc.first_pass_prior), here the cost model's own.
            prior = cost.first_pass or None
            policy = AdaptivePolicy(costs=true_curve, learn_costs=False) if oracle_costs else AdaptivePolicy(first_pass=prior)
            if second_call and not oracle_costs:
                first = AdaptivePolicy(first_pass=prior)
                replay(traces[names[i - 1]], first, cost, max_tokens)
                policy = AdaptivePolicy(costs=first.costs())
                policy.resume(first.earned())
            auto = replay(agrees, policy, cost, max_tokens)
            rows.append({"costs": cost.label, "prompt": name, "tokens": min(max_tokens, len(agrees)), "target_only": 1 / cost.batch(1),
                         "fixed": fixed, "auto": auto.tokens_per_second, "auto_ks": auto.ks})
    return rows


def shifted(traces: dict[str, list[bool]], shifts: int, max_tokens: int) -> dict[str, dict[int, list[bool]]]:
    """Each trace from starts 0, 2, .., 2 (shifts - 1), as long as max_tokens fit."""
    return {name: {2 * i: agrees[2 * i :] for i in range(shifts) if len(agrees) - 2 * i >= max_tokens} for name, agrees in traces.items()}


def random_texts(traces: dict[str, list[bool]], count: int, max_tokens: int, agreement: float | None = None,
                 seed: int = 0) -> dict[str, dict[int, list[bool]]]:
    """`count` random traces per prompt, max_tokens long, each position a miss independently at
    that prompt's own miss rate (over its whole recorded trace), or at 1 - agreement. Example:
    story, 7 misses in 256 tokens -> each position agrees with probability 249 / 256 = 0.973."""
    rng = random.Random(seed)
    out = {}
    for name, agrees in traces.items():
        rate = sum(agrees) / len(agrees) if agreement is None else agreement
        out[name] = {i: [rng.random() < rate for _ in range(max_tokens)] for i in range(count)}
    return out


def print_shifts(rows: list[dict], grid: Sequence[int]) -> None:
    """rows from compare() over traces named "prompt@start" (or "prompt@i", random texts), per
    costs and prompt: the mean, lowest and highest of auto / best on the grid text by text, and
    auto's mean tokens/s over the best fixed k's mean (the k in 0..16 best on average, not text
    by text; k = 0 is target-only)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["costs"], r["prompt"].split("@")[0]), []).append(r)
    print(f"{'costs':>14} {'prompt':>8} {'texts':>6} {'auto/grid mean':>14} {'lowest':>7} {'highest':>7} {'auto/best mean k':>16}")
    for (costs, prompt), group in groups.items():
        ratios = [r["auto"] / max(r["fixed"][k] for k in grid) for r in group]
        means = {0: group[0]["target_only"]} | {k: sum(r["fixed"][k] for r in group) / len(group) for k in group[0]["fixed"]}
        best = max(means, key=means.get)
        on_average = sum(r["auto"] for r in group) / len(group) / means[best]
        print(f"{costs:>14} {prompt:>8} {len(ratios):>6} {sum(ratios) / len(ratios):>14.3f} {min(ratios):>7.3f} {max(ratios):>7.3f}"
              f" {on_average:>9.3f} (k={best})")


def print_rows(rows: list[dict], grid: Sequence[int]) -> None:
    print(f"{'costs':>14} {'prompt':>8} {'tokens':>6} {'best k':>6} {'speed-up':>8} "
          + " ".join(f"{'k=' + str(k):>6}" for k in grid) + f" {'auto':>6} {'auto/best':>9} {'auto/grid':>9}  auto's k per round")
    for r in rows:
        base = r["target_only"]
        best = max(r["fixed"], key=r["fixed"].get)
        on_grid = max(r["fixed"][k] for k in grid)
        print(f"{r['costs']:>14} {r['prompt']:>8} {r['tokens']:>6} {best:>6} {r['fixed'][best] / base:>8.2f} "
              + " ".join(f"{r['fixed'][k] / base:>6.2f}" for k in grid)
              + f" {r['auto'] / base:>6.2f} {r['auto'] / r['fixed'][best]:>9.3f} {r['auto'] / on_grid:>9.3f}  {r['auto_ks']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="agreement traces of the built-in pair on the built-in prompts (llama.cpp)")
    rec.add_argument("-n", "--max-tokens", type=int, default=256)
    rec.add_argument("--json", type=Path, default=TRACES)
    cmp = sub.add_parser("compare", help="auto against fixed k on the traces, simulated clock")
    cmp.add_argument("--costs", type=Path, help="a synthetic_pair.py sweep --json file, or a gpu_check.sh run's gpu_check.json")
    cmp.add_argument("--curve", action="append", default=[], metavar="SLOPE,C",
                     help="(repeatable, also or instead) a linear cost model: T(n) = T(1) (1 + SLOPE (n - 1)), draft C x T(1)")
    cmp.add_argument("--traces", type=Path, default=TRACES)
    cmp.add_argument("--prompts", default="chat,story")
    cmp.add_argument("-n", "--max-tokens", type=int, default=128)
    cmp.add_argument("--grid", default="8,12,16", help="the fixed k a sweep measures (column auto/grid)")
    cmp.add_argument("--shifts", type=int, default=0, help="replay each text from this many starts, 2 tokens apart")
    cmp.add_argument("--random", type=int, default=0, help="instead: this many random texts per prompt, misses independent at its own rate")
    cmp.add_argument("--agreement", type=float, help="with --random: this agreement rate instead of each prompt's own")
    cmp.add_argument("--first-pass", type=float, default=0.0, metavar="MS", help="a size's first pass in a call costs this much more (RPC: about 50)")
    cmp.add_argument("--draft-scale", type=float, default=1.0, help="multiply the measured draft step (a dearer draft: c x this)")
    cmp.add_argument("--catch-up", type=float, default=CATCH_UP_PER_TOKEN, metavar="S", help="each catch-up token beyond the first costs S draft steps")
    cmp.add_argument("--oracle-costs", action="store_true", help="auto is handed the true costs instead of learning them")
    cmp.add_argument("--second-call", action="store_true", help="auto's second call: it starts from what a first call on the text before learnt (the tuning record)")
    cmp.add_argument("--before", help="also replay the policy of this git ref (git archive into a temporary folder)")
    cmp.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    if args.command == "compare" and not (args.costs or args.curve):
        parser.error("compare needs --costs or --curve")
    if args.command == "record":
        args.json.write_text(json.dumps(record(args.max_tokens), indent=1) + "\n")
        return 0
    traces = {name: agrees for name, agrees in load_traces(args.traces).items() if name in args.prompts.split(",")}
    grid = [int(k) for k in args.grid.split(",")]
    if args.before:
        from overhead import export  # the same `git archive` export as the overhead benchmark

        with tempfile.TemporaryDirectory() as tmp:
            code = export(args.before, Path(tmp))
            print(f"policy at {args.before}:")
            child = [sys.executable, __file__] + [a for a in (argv or sys.argv[1:]) if a not in ("--before", args.before)]
            subprocess.run(child, env={**os.environ, "SPECDEC_CODE": str(code)}, check=True)
        print("policy here:")
    if args.shifts or args.random:
        texts = random_texts(traces, args.random, args.max_tokens, args.agreement) if args.random else shifted(traces, args.shifts, args.max_tokens)
        traces = {f"{name}@{start}": agrees for name, starts in texts.items() for start, agrees in starts.items()}
    costs = (costs_from_json(args.costs, args.draft_scale) if args.costs else []) + [Costs.linear(spec) for spec in args.curve]
    costs = [dataclasses.replace(c, first_pass=args.first_pass / 1000, catch_up_share=args.catch_up) for c in costs]
    rows = compare(traces, costs, args.max_tokens, oracle_costs=args.oracle_costs, second_call=args.second_call)
    (print_shifts if args.shifts or args.random else print_rows)(rows, grid)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
