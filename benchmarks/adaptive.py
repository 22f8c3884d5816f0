"""Tokens per second of `auto` against fixed k, target-only and prompt lookup, on the built-in pair.

    flock /tmp/specdec-llama.lock python benchmarks/adaptive.py --prompt story --reps 3
    flock /tmp/specdec-llama.lock python benchmarks/adaptive.py --prompt edit --reps 3

One process loads the pair once; each repetition runs every configuration once, in a
shuffled order, at temperature 0 for `--tokens` tokens, and the table shows the median (and
the range) of tokens per second, prefill excluded. Before each repetition it waits (up to a
minute) until the CPU is idle, since other processes on a 2-core machine distort timings.

Left out: the statistics of the runs (see `specdec bench`) and exactness (the tests).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.events import Round, Token  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.prompts import BUILTIN_PROMPTS  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.maths.sampling import GREEDY  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402

# The built-in suite's prompts: "story" (free prose) and "edit" (quotes a paragraph back).
PROMPTS = {p.name: p.text for p in BUILTIN_PROMPTS if p.name in ("story", "edit")}
# name -> (drafter or None for target-only, draft_tokens, p_min)
CONFIGS = {
    "target-only": (None, 1, None),
    "model k=4": ("model", 4, None),
    "model k=8": ("model", 8, None),
    "model auto": ("model", "auto", None),
    "model auto p-min 0.2": ("model", "auto", 0.2),
    "model auto p-min 0.5": ("model", "auto", 0.5),
    "lookup k=8": ("lookup", 8, None),
    "lookup auto": ("lookup", "auto", None),
    "model+lookup auto": ("model+lookup", "auto", None),
}


def cpu_busy(seconds: float = 0.5) -> float:
    """Share of all CPU time spent busy over `seconds` (while this process sleeps)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(total1 - total0, 1)


def wait_for_quiet(limit: float = 60.0) -> float:
    start = time.time()
    while time.time() - start < limit:
        load = cpu_busy()
        if load < 0.15:
            return load
    return load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt", choices=sorted(PROMPTS), default="story")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names from: " + ", ".join(CONFIGS))
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",")]
    draft_path, target_path = builtin_pair()
    speeds: dict[str, list[float]] = {name: [] for name in names}
    extra: dict[str, list[str]] = {name: [] for name in names}
    with open_pair(draft_path, target_path, LoadOptions(n_ctx=2048)) as pair:
        ids = pair.prompt_tokens(PROMPTS[args.prompt])
        rng = random.Random(0)
        for rep in range(args.reps):
            load = wait_for_quiet()
            order = names[:]
            rng.shuffle(order)
            for name in order:
                drafter, k, p_min = CONFIGS[name]
                engine = pair.engine(speculative=drafter is not None, drafter=drafter or "model")
                config = GenerationConfig(max_tokens=args.tokens, sampling=GREEDY)
                events = list(engine.generate(ids, config, draft_policy(k, p_min)))
                rounds = [e for e in events if isinstance(e, Round)]
                tokens = sum(isinstance(e, Token) for e in events)
                speeds[name].append(tokens / sum(r.seconds for r in rounds))
                drafted = sum(r.drafted for r in rounds)
                accepted = sum(r.accepted for r in rounds)
                extra[name].append(f"{len(rounds)} rounds, {accepted}/{drafted} accepted")
            print(f"rep {rep + 1}: CPU busy before it {load:.0%}", file=sys.stderr)
    # The machine's speed drifts between repetitions, so the speed-up is taken within each one.
    base = speeds.get("target-only")
    print(f"prompt {args.prompt!r}, {args.tokens} tokens, temperature 0, {args.reps} repetitions")
    print(f"{'configuration':22} {'tok/s median':>12} {'range':>15} {'speed-up median (range)':>26}  last run")
    for name in names:
        median = statistics.median(speeds[name])
        ratios = [s / b for s, b in zip(speeds[name], base)] if base else []
        ratio = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
        print(f"{name:22} {median:12.1f} {min(speeds[name]):7.1f}-{max(speeds[name]):<7.1f} {ratio:>26}  {extra[name][-1]}")


if __name__ == "__main__":
    main()
