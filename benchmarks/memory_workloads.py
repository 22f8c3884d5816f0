"""Repetitive workloads with and without the drafting memory, side by side.

Two workloads of sequential calls, as an agent or an editor plugin makes them:

- `extract`: 20 calls that extract the same fields as JSON from 20 different short texts;
- `edit`: a code-editing session of 10 calls, each asking for a function back with one small change.

Each call is decoded by every configuration in turn, on the same loaded pair (interleaved,
so all see the same machine state): target-only, the draft model (`-k auto`), lookup,
model+lookup and cascade without memory, and the same three with the memory (drafting/memory.py, the
same `DraftMemory` that `--draft-cache` loads and saves and `specdec serve` keeps; here it
stays in the process between calls, each configuration with its own, starting empty).
"lookup+memory latest" is lookup with the memory as it was before the longest agreement:
each n-gram's latest occurrence wins, in the context and in the memory (places = 1).
`--configs` picks some (target-only always runs).
Greedy (T = 0) output must be identical across configurations; the script checks it.
Reported per workload and configuration: tokens per target pass, decode tokens/s, and the
speed-up over target-only (the ratio of tokens/s, decode only), and the drafting time per
drafted token by kind of round (model: step by step; guessed: a cascade round that scored
the lookup's guess in one draft batch).

    flock /tmp/llama.lock python3 benchmarks/memory_workloads.py --out /tmp/memory.json
    flock /tmp/llama.lock python3 benchmarks/memory_workloads.py --extra 60 --temperature 0.8 --verify auto

`--extra N` uses synthetic_pair.py's deepened target (the built-in F32 target with N
zero-output blocks: the same text at a realistic cost). `--verify` is the rule that keeps the
model's drafts (lookup's are deterministic: every rule is the token rule there). At
`--temperature` above 0 each call is seeded by its number, the same for every configuration,
but texts differ between configurations and only rates compare ("same text" is not checked).

Left out: llama.cpp's ngram-cache (native_workloads.py runs it beside these).

Produces docs/benchmarks.md, "Drafters on repetitive workloads, and the drafting memory": its table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.events import Round  # noqa: E402
from specdec_cli.drafting.lookup import LookupOptions  # noqa: E402
from specdec_cli.drafting.memory import DraftMemory  # noqa: E402
from specdec_cli.drafting.ngram import PLACES
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.options import DEFAULT_VERIFY, VERIFY_RULES, parse_verify  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402
from specdec_cli.decoding.stats import RunStats

PEOPLE = [
    ("Alice Moreau", 34, "Lyon", "nurse"), ("Bram de Vries", 51, "Utrecht", "carpenter"), ("Chen Wei", 28, "Chengdu", "designer"),
    ("Dana Okafor", 45, "Lagos", "lawyer"), ("Erik Lund", 39, "Bergen", "fisherman"), ("Fatima Zahra", 23, "Fez", "student"),
    ("Gustavo Lima", 60, "Recife", "teacher"), ("Hana Sato", 31, "Osaka", "chef"), ("Ivan Petrov", 47, "Kazan", "engineer"),
    ("Julia Novak", 36, "Brno", "pharmacist"), ("Kofi Mensah", 29, "Kumasi", "programmer"), ("Lena Braun", 54, "Graz", "architect"),
    ("Mateo Ruiz", 41, "Sevilla", "baker"), ("Nora Quinn", 26, "Galway", "musician"), ("Omar Haddad", 58, "Amman", "doctor"),
    ("Priya Nair", 33, "Kochi", "scientist"), ("Quentin Roy", 44, "Quebec", "pilot"), ("Rosa Conti", 38, "Turin", "journalist"),
    ("Sven Berg", 62, "Uppsala", "farmer"), ("Tara Singh", 27, "Pune", "accountant"),
]  # fmt: skip
EXTRACT = (
    "Extract the person's name, age, city and job from the text as JSON with the keys "
    '"name", "age", "city" and "job", and nothing else.\n\nText: {name} is {age} years old, lives in {city} and works as a {job}.'
)
FUNCTION = '''def total_price(items, tax_rate):
    """Sum the prices of the items and add the tax."""
    subtotal = 0.0
    for item in items:
        subtotal += item["price"] * item["quantity"]
    tax = subtotal * tax_rate
    return round(subtotal + tax, 2)'''
EDITS = [
    "rename the function to order_total", "rename tax_rate to rate", "rename subtotal to net", "rename items to lines",
    "round to 3 digits instead of 2", "rename tax to vat", "rename item to line", "make tax_rate default to 0.2",
    "use a generator expression for the subtotal", "add a type hint: items is a list of dicts",
]  # fmt: skip
EDIT = "Return this Python function with one change: {change}. Reply with the code only.\n\n{function}"

CONFIGS = [  # (name, drafter, with memory); None: target-only
    ("target-only", None, False), ("model", "model", False), ("lookup", "lookup", False),
    ("model+lookup", "model+lookup", False), ("cascade", "cascade", False), ("lookup+memory", "lookup", True),
    ("model+lookup+memory", "model+lookup", True), ("cascade+memory", "cascade", True),
    ("lookup+memory latest", "lookup", True),  # each n-gram's latest occurrence only, as before the longest agreement
]  # fmt: skip
LATEST = " latest"  # a configuration whose lookup and memory keep one place per n-gram (places=1)


def workloads() -> dict[str, list[str]]:
    return {
        "extract": [EXTRACT.format(name=n, age=a, city=c, job=j) for n, a, c, j in PEOPLE],
        "edit": [EDIT.format(change=change, function=FUNCTION) for change in EDITS],
    }


def tally(event, drafting: dict) -> None:
    """Draft seconds and drafted tokens by kind of round: 'model' (step by step), 'guessed' (a
    cascade round that scored a lookup guess in one batch), 'lookup' (copied, no model)."""
    if isinstance(event, Round) and event.drafted:
        kind = "guessed" if event.drafter.startswith("cascade:") else event.drafter.split(":", 1)[0]
        sec_n = drafting.setdefault(kind, [0.0, 0])
        sec_n[0] += event.draft_seconds
        sec_n[1] += event.drafted


def measure(args: argparse.Namespace) -> dict:
    draft, target = builtin_pair()
    if args.extra:
        from synthetic_pair import deepened_target

        target = deepened_target(args.extra)
    results = {}
    with open_pair(draft, target, LoadOptions(n_ctx=4096)) as pair:
        for workload, prompts in workloads().items():
            if args.workloads and workload not in args.workloads:
                continue
            max_tokens = args.max_tokens or (96 if workload == "extract" else 160)
            configs = [c for c in CONFIGS if not args.configs or c[0] in args.configs or c[0] == "target-only"]
            memories = {name: DraftMemory(places=1 if name.endswith(LATEST) else PLACES) for name, _, with_memory in configs if with_memory}
            totals = {name: RunStats() for name, _, _ in configs}
            drafting = {name: {} for name, _, _ in configs}  # kind of round -> [draft seconds, drafted tokens]
            texts: dict[str, list[str]] = {name: [] for name, _, _ in configs}
            for i, text in enumerate(prompts):
                ids = pair.prompt_tokens(text, chat=True)
                config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temperature=args.temperature), seed=i, verify=args.verify)
                for name, drafter, _ in configs:
                    memory = memories.get(name)
                    lookup = LookupOptions(places=1 if name.endswith(LATEST) else PLACES)
                    engine = pair.engine(speculative=drafter is not None, drafter=drafter or "model", lookup=lookup, memory=memory)
                    outcome = consume(engine.generate(ids, config, draft_policy("auto") if drafter else None), lambda e, d=drafting[name]: tally(e, d))
                    totals[name] = totals[name].merge(outcome.stats)
                    texts[name].append(outcome.text)
                    if memory is not None:
                        memory.add(ids + outcome.tokens)
            base = totals["target-only"]
            rows = {}
            for name, _, _ in configs:
                t = totals[name]
                rows[name] = {
                    "tokens": t.new_tokens, "target_passes": t.target_passes, "tokens_per_pass": t.tokens_per_pass,
                    "tokens_per_second": t.tokens_per_second, "speedup": t.tokens_per_second / base.tokens_per_second,
                    "acceptance": t.acceptance_rate, "identical_to_target_only": texts[name] == texts["target-only"] if args.temperature == 0 else None,
                    "draft_ms_per_token": {kind: 1e3 * sec / n for kind, (sec, n) in drafting[name].items() if n},
                }  # fmt: skip
            results[workload] = {"calls": len(prompts), "max_tokens": max_tokens, "rows": rows}
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="*", choices=["extract", "edit"])
    parser.add_argument("--configs", nargs="*", choices=[c[0] for c in CONFIGS], help="which configurations (target-only always runs)")
    parser.add_argument("-n", "--max-tokens", type=int, default=0, help="per call (default: 96 extract, 160 edit)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--verify", type=parse_verify, default=DEFAULT_VERIFY, help="the rule that keeps the model's drafts: " + ", ".join(VERIFY_RULES))
    parser.add_argument("--extra", type=int, default=0, help="deepen the built-in target by N zero blocks (synthetic_pair.py)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = measure(args)
    for workload, r in results.items():
        print(f"{workload}: {r['calls']} calls, up to {r['max_tokens']} tokens each")
        print(f"  {'configuration':<22} {'tokens':>6} {'passes':>6} {'tok/pass':>8} {'tok/s':>7} {'speed-up':>8} {'accept':>6}  same text")
        for name, row in r["rows"].items():
            print(
                f"  {name:<22} {row['tokens']:>6} {row['target_passes']:>6} {row['tokens_per_pass']:>8.2f} {row['tokens_per_second']:>7.1f} "
                f"{row['speedup']:>7.2f}x {row['acceptance']:>6.2f}  {row['identical_to_target_only']}  "
                + " ".join(f"{kind} {ms:.2f} ms/draft" for kind, ms in sorted(row["draft_ms_per_token"].items()))
            )
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"}, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
