"""Repetitive workloads with and without the drafting memory, side by side.

Four workloads of sequential calls, as an agent or an editor plugin makes them:

- `extract`: 20 calls that extract the same fields as JSON from 20 different short texts;
- `notes`: 10 calls that extract name, city and job as JSON from 10 different short notes,
  each worded its own way (the memory proposes the previous call's values after each key);
- `edit`: a code-editing session of 10 calls, each asking for a function back with one small change;
- `suite`: the 7 prompts of the bench's built-in suite (prompts.py), which repeat nothing.

Each call is decoded by every configuration in turn, on the same loaded pair (interleaved,
so all see the same machine state; each drafter with the memory right after itself without,
every other call in reverse order): target-only, lookup, model+lookup and cascade without the
memory and the same three with it (drafting/memory.py, the same `DraftMemory` that
`--draft-cache` loads and saves and `specdec serve` keeps, with what lookup's proposals earned in
earlier calls; here it stays in the process between calls, each configuration with its own,
starting empty), all `-k auto`. `--configs` picks some (target-only always runs); two more
can be asked for: "model" (the draft model alone) and "lookup+memory latest" (each n-gram's
latest occurrence wins, in the context and in the memory: places = 1).
With --repeats, every workload runs again from empty memories (at temperature > 0 with other
seeds), and each repeat's ratio is shown beside the pooled one, with a 95 % confidence interval
for the ratio (intervals.py: Student's t over the repeats' log ratios). On a shared machine
one repeat's ratio moves by several per cent, so a ratio under 1 says the memory made that
workload slower only where the whole interval lies below 1; the script names those cells. Of
many cells some fall wholly below 1 by chance (one in forty where the memory changes nothing), so
it also gives each drafter's ratio over all the workloads run (intervals.across_interval).
Greedy (T = 0) output must be identical across configurations; the script checks it.
Reported per workload and configuration: tokens per target pass, decode tokens/s, and the
speed-up over target-only (the ratio of tokens/s, decode only), and the drafting time per
drafted token by kind of round (model: step by step; guessed: a cascade round that scored
the lookup's guess in one draft batch). Then, per workload and drafter, the memory on against
the memory off (the ratio of their tokens/s), and the worst of those ratios.

    flock /tmp/llama.lock python3 benchmarks/memory_workloads.py --out /tmp/memory.json
    flock /tmp/llama.lock python3 benchmarks/memory_workloads.py --workloads notes extract --temperature 0.8
    flock /tmp/llama.lock python3 benchmarks/memory_workloads.py --extra 60 --temperature 0.8 --verify auto

`--extra N` uses synthetic_pair.py's deepened target (the built-in F32 target with N
zero-output blocks: the same text at a realistic cost). `--verify` is the rule that keeps the
model's drafts (lookup's are deterministic: every rule is the token rule there). At
`--temperature` above 0 each call is seeded by its number (and the repeat's), the same for every
configuration, but texts differ between configurations and only rates compare ("same text" is
not checked): a text's own acceptance moves its rate by more than the memory does, so compare
over several repeats.

Left out: llama.cpp's ngram-cache (native_workloads.py runs it beside these).

Produces docs/benchmarks.md, "Drafters on repetitive workloads, and the drafting memory": its tables.
"""

from __future__ import annotations

import argparse
import functools
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
from specdec_cli.drafting.ngram import PLACES  # noqa: E402
from specdec_cli.prompts import builtin_prompts  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.options import DEFAULT_VERIFY, VERIFY_RULES, parse_verify  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402
from specdec_cli.decoding.stats import RunStats  # noqa: E402
from intervals import across_interval, ratio_interval, shown  # noqa: E402

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
NOTES = [
    "Met Maria Lopez at the conference; she flew in from Valencia and teaches chemistry at a high school.",
    "Call back Tom Becker (Hamburg office) about the invoice. He is the plumber who fixed the boiler.",
    "Reminder: Aiko Tanaka, our new translator, starts Monday. She is relocating from Sapporo.",
    "Sam Okoro sent the drawings again. Architect, works out of Nairobi, prefers email over calls.",
    "Lunch with Pierre Dubois next week. Still a firefighter in Marseille, still running marathons.",
    "Ines Ferreira (Porto) asked about the lease; she is a veterinarian and needs a ground-floor clinic.",
    "The electrician, Jonas Weber, can come on Thursday. He lives in Munich and charges by the hour.",
    "Got a postcard from Olga Ivanova in Tallinn, where she now works as a librarian.",
    "New client: Raj Patel, dentist, Leicester. Wants the website redesigned before spring.",
    "Grace Kim wrote from Busan: the bakery is doing well and she is hiring another pastry chef.",
]  # fmt: skip
NOTE = 'From this note, extract the person\'s name, city and job as JSON with the keys "name", "city" and "job". Answer with the JSON only.\n\nNote: {note}'

CONFIGS = [  # (name, drafter, with memory); None: target-only
    ("target-only", None, False), ("model", "model", False), ("lookup", "lookup", False),
    ("model+lookup", "model+lookup", False), ("cascade", "cascade", False), ("lookup+memory", "lookup", True),
    ("model+lookup+memory", "model+lookup", True), ("cascade+memory", "cascade", True),
    ("lookup+memory latest", "lookup", True),  # each n-gram's latest occurrence only, as before the longest agreement
]  # fmt: skip
OPTIONAL = ("model", "lookup+memory latest")  # run only when --configs names them
LATEST = " latest"  # a configuration whose lookup and memory keep one place per n-gram (places=1)
MEMORY = "+memory"
MAX_TOKENS = {"extract": 96, "notes": 48, "edit": 160, "suite": 64}  # per call, unless -n


def workloads() -> dict[str, list[str]]:
    return {
        "extract": [EXTRACT.format(name=n, age=a, city=c, job=j) for n, a, c, j in PEOPLE],
        "notes": [NOTE.format(note=note) for note in NOTES],
        "edit": [EDIT.format(change=change, function=FUNCTION) for change in EDITS],
        "suite": [prompt.text for prompt in builtin_prompts()],
    }


def memory_ratios(speeds: dict[str, float]) -> dict[str, float]:
    """Per drafter, the memory on against off: tokens/s of "X+memory" over "X", where both ran.
    Example: {"lookup": 50.0, "lookup+memory": 60.0} (tokens/s) -> {"lookup": 1.2}."""
    return {name: speeds[name + MEMORY] / speeds[name] for name in speeds if name + MEMORY in speeds and speeds[name] > 0}


def same_text_ratios(calls: dict[str, list[RunStats]], texts: dict[str, list[str]]) -> dict[str, tuple[float, int]]:
    """Per drafter, the memory on against off over only the calls whose two texts agree, and how
    many calls were left out. At T = 0 a near-tie between the target's two likeliest tokens,
    which the batch shapes of a round decide, can make one text differ from the other; that call
    then measures another text (a longer answer, drafted better or worse), not the memory.
    Example: lookup's calls ran at 10 and 10 tokens/s off, 12 and 30 on, the second call's
    texts differ -> {"lookup": (1.2, 1)}."""
    out = {}
    for name in calls:
        if name + MEMORY not in calls:
            continue
        same = [i for i, (a, b) in enumerate(zip(texts[name], texts[name + MEMORY])) if a == b]
        off, on = (functools.reduce(RunStats.merge, (calls[n][i] for i in same), RunStats()) for n in (name, name + MEMORY))
        if off.tokens_per_second > 0:
            out[name] = (on.tokens_per_second / off.tokens_per_second, len(calls[name]) - len(same))
    return out


def tally(event, drafting: dict) -> None:
    """Draft seconds and drafted tokens by kind of round: 'model' (step by step), 'guessed' (a
    cascade round that scored a lookup guess in one batch), 'lookup' (copied, no model)."""
    if isinstance(event, Round) and event.drafted:
        kind = "guessed" if event.drafter.startswith("cascade:") else event.drafter.split(":", 1)[0]
        sec_n = drafting.setdefault(kind, [0.0, 0])
        sec_n[0] += event.draft_seconds
        sec_n[1] += event.drafted


def side_by_side(configs: list) -> list:
    """The configurations in the order a call runs them: each drafter's with the memory right after
    its own without, so that the two a ratio compares run back to back.
    Example: target-only, lookup, model+lookup, lookup+memory -> target-only, lookup, lookup+memory, model+lookup."""
    names = [name for name, _, _ in configs]

    def place(config):
        name = config[0]
        own = name.split(MEMORY)[0]  # the drafter without the memory: 'lookup+memory latest' -> 'lookup'
        return (names.index(own) if own in names else names.index(name), MEMORY in name, names.index(name))

    return sorted(configs, key=place)


def run_workload(
    pair, prompts: list[str], configs: list, max_tokens: int, args: argparse.Namespace, repeat: int, drafting: dict, texts: dict, calls: dict
) -> dict:
    """Every call of one workload by every configuration in turn (side_by_side, every other call
    in reverse order, so that drift hits the memory on and off alike), each memory starting
    empty: RunStats per configuration. At temperature > 0 call i is seeded i + 1000 x repeat (each
    repeat samples other texts, so text luck averages out over repeats). Each configuration's
    drafting is tallied into drafting[name], its texts appended to texts[name] and each call's
    RunStats to calls[name]."""
    memories = {name: DraftMemory(places=1 if name.endswith(LATEST) else PLACES) for name, _, with_memory in configs if with_memory}
    totals = {name: RunStats() for name, _, _ in configs}
    order = side_by_side(configs)
    for i, text in enumerate(prompts):
        ids = pair.prompt_tokens(text, chat=True)
        seed = i + 1000 * repeat if args.temperature > 0 else i
        config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temperature=args.temperature), seed=seed, verify=args.verify)
        for name, drafter, _ in order[::-1] if (i + repeat) % 2 else order:
            memory = memories.get(name)
            lookup = LookupOptions(places=1 if name.endswith(LATEST) else PLACES)
            engine = pair.engine(speculative=drafter is not None, drafter=drafter or "model", lookup=lookup, memory=memory)
            outcome = consume(engine.generate(ids, config, draft_policy("auto") if drafter else None), lambda e, d=drafting[name]: tally(e, d))
            totals[name] = totals[name].merge(outcome.stats)
            texts[name].append(outcome.text)
            calls[name].append(outcome.stats)
            if memory is not None:
                memory.add(ids + outcome.tokens)
    return totals


def rows_of(configs: list, totals: dict, drafting: dict, texts: dict, temperature: float) -> dict:
    base = totals["target-only"]
    rows = {}
    for name, _, _ in configs:
        t = totals[name]
        rows[name] = {
            "tokens": t.new_tokens, "target_passes": t.target_passes, "tokens_per_pass": t.tokens_per_pass,
            "tokens_per_second": t.tokens_per_second, "speedup": t.tokens_per_second / base.tokens_per_second,
            "acceptance": t.acceptance_rate, "identical_to_target_only": texts[name] == texts["target-only"] if temperature == 0 else None,
            "draft_ms_per_token": {kind: 1e3 * sec / n for kind, (sec, n) in drafting[name].items() if n},
        }  # fmt: skip
    return rows


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
            max_tokens = args.max_tokens or MAX_TOKENS[workload]
            wanted = args.configs or [name for name, _, _ in CONFIGS if name not in OPTIONAL]
            configs = [c for c in CONFIGS if c[0] in wanted or c[0] == "target-only"]
            totals = {name: RunStats() for name, _, _ in configs}
            drafting: dict[str, dict] = {name: {} for name, _, _ in configs}  # kind of round -> [draft seconds, drafted tokens]
            texts: dict[str, list[str]] = {name: [] for name, _, _ in configs}
            calls: dict[str, list[RunStats]] = {name: [] for name, _, _ in configs}
            by_repeat = []
            for repeat in range(args.repeats):
                once = run_workload(pair, prompts, configs, max_tokens, args, repeat, drafting, texts, calls)
                by_repeat.append(memory_ratios({name: t.tokens_per_second for name, t in once.items()}))
                totals = {name: totals[name].merge(t) for name, t in once.items()}
            rows = rows_of(configs, totals, drafting, texts, args.temperature)
            results[workload] = {"calls": len(prompts), "max_tokens": max_tokens, "repeats": args.repeats, "rows": rows,
                                 "memory_on_off": memory_ratios({name: row["tokens_per_second"] for name, row in rows.items()}),
                                 "memory_on_off_by_repeat": by_repeat,
                                 "memory_on_off_interval": {name: ratio_interval([rep[name] for rep in by_repeat]) for name in by_repeat[0]}}  # fmt: skip
            if args.temperature == 0:
                results[workload]["memory_on_off_same_text"] = same_text_ratios(calls, texts)
    return results


def spread(result: dict, name: str) -> str:
    """Each repeat's memory on / off for one drafter and the 95 % interval, when there were several
    repeats: ' (0.98, 1.04; 95 %: 0.83-1.20)'."""
    if result["repeats"] < 2:
        return ""
    return " (" + ", ".join(f"{rep[name]:.2f}" for rep in result["memory_on_off_by_repeat"]) + f"; {shown(result['memory_on_off_interval'][name])})"


def across_workloads(results: dict) -> dict[str, tuple[float, float, float]]:
    """Per drafter, the memory on / off over all the workloads run, each weighing the same, with
    its 95 % interval (intervals.across_interval): whether the memory costs across workloads,
    where one workload's own interval may fall below 1 by chance. Needs two repeats or more."""
    by_workload = [r["memory_on_off_by_repeat"] for r in results.values()]
    names = by_workload[0][0] if by_workload else {}
    found = {name: across_interval([[rep[name] for rep in reps] for reps in by_workload]) for name in names}
    return {name: interval for name, interval in found.items() if interval is not None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="*", choices=list(MAX_TOKENS))
    parser.add_argument("--configs", nargs="*", choices=[c[0] for c in CONFIGS], help="which configurations (target-only always runs)")
    parser.add_argument("-n", "--max-tokens", type=int, default=0, help="per call (default: " + ", ".join(f"{n} {w}" for w, n in MAX_TOKENS.items()) + ")")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--verify", type=parse_verify, default=DEFAULT_VERIFY, help="the rule that keeps the model's drafts: " + ", ".join(VERIFY_RULES))
    parser.add_argument("--extra", type=int, default=0, help="deepen the built-in target by N zero blocks (synthetic_pair.py)")
    parser.add_argument("--repeats", type=int, default=1, help="run every workload this many times, memories afresh each time (at temperature > 0 with other seeds)")
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
    print("memory on / off (tokens/s):")
    for workload, r in results.items():
        print(f"  {workload:<8} " + "  ".join(f"{name} {ratio:.2f}x{spread(r, name)}" for name, ratio in r["memory_on_off"].items()))
    ratios = [(ratio, workload, name) for workload, r in results.items() for name, ratio in r["memory_on_off"].items()]
    if ratios:
        print("worst: {:.2f}x ({}, {})".format(*min(ratios)))
    slower = [f"{workload} {name}" for workload, r in results.items() for name, ci in r["memory_on_off_interval"].items() if ci and ci[1] < 1.0]
    across = across_workloads(results)
    if any(r["repeats"] >= 2 for r in results.values()):
        print("slower with the memory, the whole 95 % interval below 1: " + (", ".join(slower) or "none"))
        print("over the workloads, each weighing the same: " + "  ".join(f"{name} {x:.2f}x ({shown((low, high))})" for name, (x, low, high) in across.items()))
    if any(r.get("memory_on_off_same_text") for r in results.values()):
        print("memory on / off over the calls whose texts agree (calls left out):")
        for workload, r in results.items():
            print(f"  {workload:<8} " + "  ".join(f"{name} {ratio:.2f}x ({left})" for name, (ratio, left) in r["memory_on_off_same_text"].items()))
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"}, "results": results, "across_workloads": across}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
