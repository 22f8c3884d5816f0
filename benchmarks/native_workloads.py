"""specdec beside llama.cpp's own speculative tools on the repetitive workloads.

The two workloads of memory_workloads.py (`extract`: 20 calls that extract the same JSON fields
from 20 short texts, up to 96 tokens each; `edit`: a code-editing session of 10 calls, up to
160 tokens each), greedy (T = 0), on the built-in pair. Each call is decoded by every
configuration in turn, one after another (interleaved, so all meet the same machine state),
after one short unrecorded generation per specdec drafter:

- specdec, on one loaded pair: target-only; the draft model at a fixed k = 8 (what
  llama-speculative-simple does) and at `-k auto`; lookup and model+lookup with the drafting
  memory (drafting/memory.py's `DraftMemory`, kept across the calls of a workload, each configuration
  with its own, starting empty), as memory_workloads.py runs them;
- llama.cpp, one process per call (bench/native.py runs it): `llama-speculative-simple` with
  the draft model and `--spec-draft-n-max 8`, at its default `--draft-p-min` (0.00 in this
  llama.cpp: it drafts 8 tokens every round, as specdec's k = 8 does) and at 0.75 (a draft
  stops at the first token the draft gives less than 0.75); `llama-lookup` (the ngram cache) with
  `--spec-draft-n-max 8` and a dynamic cache file (`--lookup-cache-dynamic`) that persists
  across the calls of a workload, its cross-call memory, fresh for each workload; the same
  without a cache file (the call's own context only); and `llama-lookup --spec-draft-n-max 0`,
  which drafts nothing: llama.cpp's own target-only speed.

llama.cpp gets the text specdec tokenizes (the chat template rendered by specdec), which it
tokenizes with special tokens parsed; the script checks that its "encoded N tokens" equals
specdec's count. Reported per workload and configuration, sums over the calls: tokens, target
passes, tokens per pass, decode tokens/s (prefill excluded on both sides), acceptance, the
speed-up over specdec's target-only, how many calls wrote target-only's greedy text, and how
many llama.cpp runs failed (with why, in the JSON).

llama.cpp's counts differ from specdec's in two ways: they include the tokens it decodes past
-n (speculative-simple ends at -n + 1, llama-lookup up to a draft past it), and its passes are
n_predict - n_accept (each pass yields one token of the target's own plus the accepted
drafts; for llama-lookup that includes the pass over the prompt's last token). Each process
loads the models again; its tokens/s counts decoding only, so the loads do not enter.

    flock /tmp/llama.lock python3 benchmarks/native_workloads.py --out /tmp/native_workloads.json
    flock /tmp/llama.lock python3 benchmarks/native_workloads.py --calls 4 --workloads edit   # a quick look

llama.cpp's tools built from the llama.cpp that llama-cpp-python vendors (docs/benchmarks.md
has the commands); --bin names their folder.

Left out: temperature > 0 (llama.cpp's tools accept a draft when their sampler draws the same
token, which is not the speculative sampling rule); llama-lookup's static cache
(--lookup-cache-static, built from a corpus by llama-lookup-create); llama-server's
ngram-cache spec type, which keeps its cache in the server process.

Produces docs/benchmarks.md, "Comparisons with llama.cpp": the table "llama-speculative-simple and llama-lookup on the same workloads".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # memory_workloads

import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

from memory_workloads import workloads  # noqa: E402
from specdec_cli.bench.native import native_command, run_native  # noqa: E402
from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.errors import SpecdecError  # noqa: E402
from specdec_cli.drafting.memory import DraftMemory  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.tuning.policy import draft_policy  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402

K = 8  # llama.cpp's --spec-draft-n-max, and specdec's fixed k beside it
CTX = 4096
TIMEOUT = 300.0  # seconds for one llama.cpp process

SPECDEC = [  # (name, drafter, k, with memory); drafter None: target-only
    ("target-only", None, 0, False), ("model k=8", "model", K, False), ("model auto", "model", "auto", False),
    ("lookup+memory", "lookup", "auto", True), ("model+lookup+memory", "model+lookup", "auto", True),
]  # fmt: skip
LLAMA = [  # (name, binary, extra options, with a dynamic cache file kept across calls)
    ("llama target-only", "llama-lookup", ["--spec-draft-n-max", "0"], False),
    ("llama spec-simple", "llama-speculative-simple", [], False),
    ("llama spec-simple p-min 0.75", "llama-speculative-simple", ["--draft-p-min", "0.75"], False),
    ("llama lookup", "llama-lookup", ["--spec-draft-n-max", str(K)], False),
    ("llama lookup+cache", "llama-lookup", ["--spec-draft-n-max", str(K)], True),
]  # fmt: skip
EOS_PIECE = "<|im_end|>"  # SmolLM2's end of turn: llama-lookup prints it, speculative-simple does not

# run_native sends stdout and stderr to one log and removes it after a good run; the text is on
# stdout (llama.cpp's LOG) and the counts on stderr (LOG_INF), so keep both apart in files and
# pass stderr on for run_native to parse.
SPLIT = 'out=$1; err=$2; shift 2; "$@" >"$out" 2>"$err"; code=$?; cat "$err" >&2; exit $code'
_ENCODED = re.compile(r"encoded\s+(\d+)\s+tokens")


@dataclass
class Row:
    """One configuration's sums over a workload's calls."""

    tokens: int = 0
    passes: int = 0
    seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    same_text: int = 0
    prompt_ids_match: int = 0
    calls: int = 0
    failures: list[str] = field(default_factory=list)

    def to_dict(self, base_tps: float) -> dict:
        tps = self.tokens / self.seconds if self.seconds else 0.0
        return {
            "tokens": self.tokens, "target_passes": self.passes, "tokens_per_pass": self.tokens / self.passes if self.passes else None,
            "tokens_per_second": tps, "speedup": tps / base_tps if base_tps else None,
            "drafted": self.drafted, "accepted": self.accepted, "acceptance": self.accepted / self.drafted if self.drafted else None,
            "calls": self.calls, "same_text_as_target_only": self.same_text, "prompt_ids_match": self.prompt_ids_match,
            "failures": self.failures,
        }  # fmt: skip


def llama_command(binary: Path, draft: Path, target: Path, prompt: str, max_tokens: int, threads: int, extra: list[str], cache: Path | None) -> list[str]:
    """The command line of one llama.cpp configuration at T = 0 (repacking as specdec's load chose)."""
    if binary.name == "llama-speculative-simple":
        return native_command(
            binary, draft, target, prompt, draft_tokens=K, max_tokens=max_tokens, temperature=0.0,
            top_k=40, top_p=0.95, min_p=0.05, seed=0, ctx=CTX, threads=threads, extra=extra,
        )  # fmt: skip
    # llama-lookup: no draft model; --spec-draft-n-max is its n_draft
    cmd = [str(binary), "-m", str(target), "-p", prompt, "-n", str(max_tokens), "--temp", "0", "--seed", "0", "-c", str(CTX), "-t", str(threads)]
    return cmd + extra + (["--lookup-cache-dynamic", str(cache)] if cache else [])


def run_llama(command: list[str], scratch: Path) -> tuple[dict, str]:
    """Run one llama.cpp process through run_native; its counters and the text it printed on stdout."""
    out, err = scratch / "stdout.txt", scratch / "stderr.txt"
    result = run_native(["sh", "-c", SPLIT, "sh", str(out), str(err), *command], timeout=TIMEOUT)
    log = err.read_text(encoding="utf-8", errors="replace")
    encoded = _ENCODED.findall(log)
    return {**result.to_dict(), "n_predict": _counter(log, "n_predict"), "encoded": int(encoded[-1]) if encoded else None}, out.read_text(
        encoding="utf-8", errors="replace"
    )


def _counter(log: str, name: str) -> int | None:
    found = re.findall(rf"\b{name}\s*=\s*(-?\d+)", log)
    return int(found[-1]) if found else None


def generated_text(stdout: str, prompt: str) -> str | None:
    """What the tool generated: its stdout is "\\n\\n", the prompt's pieces, the new pieces, then blank
    lines. None if the echo is not the prompt (then its tokens were not specdec's either).
    Example: ("\\n\\nQ: hi A: hello<|im_end|>\\n\\n", "Q: hi") -> " A: hello"."""
    head = "\n\n" + prompt
    if not stdout.startswith(head):
        return None
    return stdout[len(head) :].split(EOS_PIECE, 1)[0]


def same_as(reference: str, reference_hit_limit: bool, text: str | None) -> bool:
    """Whether a llama.cpp text agrees with specdec's target-only text of the same call: it starts with
    it (llama.cpp decodes past -n), and if target-only ended the answer, so did llama.cpp."""
    if text is None or not text.startswith(reference):
        return False
    return reference_hit_limit or not text[len(reference) :].strip("\n")


def warm_up(pair, text: str) -> None:
    """One short unrecorded generation per drafter (first-call allocations), without memory."""
    ids = pair.prompt_tokens(text, chat=True)
    config = GenerationConfig(max_tokens=16, sampling=SamplingParams(temperature=0.0))
    for drafter in (None, "model", "lookup", "model+lookup"):
        engine = pair.engine(speculative=drafter is not None, drafter=drafter or "model")
        consume(engine.generate(ids, config, draft_policy("auto") if drafter else None))


def measure(args: argparse.Namespace) -> dict:
    draft, target = builtin_pair()
    results = {}
    with open_pair(draft, target, LoadOptions(n_ctx=CTX)) as pair, tempfile.TemporaryDirectory(prefix="native-workloads-") as tmp:
        scratch = Path(tmp)
        repack = [] if pair.target.repack else ["--no-repack"]  # as bench --native does (AMX machines)
        threads = pair.target.n_threads
        warm_up(pair, workloads()["extract"][0])
        for workload, prompts in workloads().items():
            if args.workloads and workload not in args.workloads:
                continue
            prompts = prompts[: args.calls] if args.calls else prompts
            max_tokens = 96 if workload == "extract" else 160
            memories = {name: DraftMemory() for name, _, _, with_memory in SPECDEC if with_memory}
            cache = scratch / f"{workload}.ngram-cache"  # llama-lookup creates it after the first call
            rows = {name: Row() for name, *_ in SPECDEC + LLAMA}
            calls = []
            for i, text in enumerate(prompts):
                ids = pair.prompt_tokens(text, chat=True)
                prompt = pair.target.apply_chat_template([("user", text)])  # the text ids came from
                config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temperature=0.0), seed=i)
                record = {"call": i, "prompt_tokens": len(ids)}
                reference, hit_limit = None, False
                for name, drafter, k, with_memory in SPECDEC:
                    memory = memories.get(name)
                    engine = pair.engine(speculative=drafter is not None, drafter=drafter or "model", memory=memory)
                    outcome = consume(engine.generate(ids, config, draft_policy(k) if drafter else None))
                    if memory is not None:
                        memory.add(ids + outcome.tokens)
                    if reference is None:
                        reference, hit_limit = outcome.text, outcome.stats.new_tokens >= max_tokens
                    s, row = outcome.stats, rows[name]
                    row.tokens += s.new_tokens
                    row.passes += s.target_passes
                    row.seconds += s.generation_seconds
                    row.drafted += s.drafted
                    row.accepted += s.accepted
                    row.same_text += outcome.text == reference
                    row.prompt_ids_match += 1
                    row.calls += 1
                    record[name] = {"tokens": s.new_tokens, "tokens_per_second": s.tokens_per_second}
                    print(f"  {workload} {i}: {name}: {s.new_tokens} tokens, {s.tokens_per_second:.1f} tok/s", file=sys.stderr)
                for name, binary, extra, with_cache in LLAMA:
                    row = rows[name]
                    row.calls += 1
                    command = llama_command(args.bin / binary, draft, target, prompt, max_tokens, threads, repack + extra, cache if with_cache else None)
                    try:
                        counts, stdout = run_llama(command, scratch)
                    except SpecdecError as exc:
                        row.failures.append(f"call {i}: {exc}")
                        record[name] = {"error": str(exc)}
                        print(f"  {workload} {i}: {name}: failed: {exc}", file=sys.stderr)
                        continue
                    n_predict, n_accept = counts["n_predict"] or counts["decoded_tokens"], counts["n_accept"] or 0
                    text_out = generated_text(stdout, prompt)
                    row.tokens += counts["decoded_tokens"]
                    row.passes += n_predict - n_accept  # one target token per pass, plus the accepted drafts
                    row.seconds += counts["seconds"]
                    row.drafted += counts["n_drafted"] or 0
                    row.accepted += n_accept
                    row.same_text += same_as(reference, hit_limit, text_out)
                    row.prompt_ids_match += counts["encoded"] == len(ids)
                    record[name] = {**counts, "same_text": same_as(reference, hit_limit, text_out), "echo_matches_prompt": text_out is not None}
                    print(f"  {workload} {i}: {name}: {counts['decoded_tokens']} tokens, {counts['tokens_per_second']:.1f} tok/s", file=sys.stderr)
                calls.append(record)
            base = rows["target-only"]
            base_tps = base.tokens / base.seconds if base.seconds else 0.0
            results[workload] = {
                "calls": len(prompts), "max_tokens": max_tokens, "draft_max": K, "threads": threads, "repack": pair.target.repack,
                "rows": {name: row.to_dict(base_tps) for name, row in rows.items()}, "per_call": calls,
            }  # fmt: skip
    return results


def print_table(results: dict) -> None:
    for workload, r in results.items():
        print(f"{workload}: {r['calls']} calls, up to {r['max_tokens']} tokens each, T = 0, llama.cpp --spec-draft-n-max {r['draft_max']}")
        print(f"  {'configuration':<29} {'tokens':>6} {'passes':>6} {'tok/pass':>8} {'tok/s':>7} {'speed-up':>8} {'accept':>6} {'same text':>9} {'prompt ids':>10}")
        for name, row in r["rows"].items():
            tpp = f"{row['tokens_per_pass']:.2f}" if row["tokens_per_pass"] else "-"
            acc = f"{row['acceptance']:.2f}" if row["acceptance"] is not None else "-"
            up = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
            failed = f"  {len(row['failures'])} failed" if row["failures"] else ""
            print(
                f"  {name:<29} {row['tokens']:>6} {row['target_passes']:>6} {tpp:>8} {row['tokens_per_second']:>7.1f} {up:>8} {acc:>6} "
                f"{row['same_text_as_target_only']:>4}/{row['calls']:<4} {row['prompt_ids_match']:>5}/{row['calls']:<4}{failed}"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="*", choices=["extract", "edit"])
    parser.add_argument("--calls", type=int, default=0, help="only the first N calls of each workload (default: all)")
    parser.add_argument("--bin", type=Path, default=Path("/tmp/llama-tools/bin"), help="folder of llama-speculative-simple and llama-lookup")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = measure(args)
    print_table(results)
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"}, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
