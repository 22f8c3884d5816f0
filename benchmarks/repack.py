"""What `--no-repack` costs where repacking works. Prompt and generation tokens/s, per type.

For the built-in draft (Q4_1), the built-in target (F32), and Q4_0 and Q8_0 conversions of the
same SmolLM2-135M weights (made from the F32 file by llama.cpp's quantizer into a temporary
folder), each repeat loads the model with repacking (llama.cpp's extra buffer types) and
without it, in alternating order (A B, then B A, ...), and measures on a fresh context:

- prompt: one batch of --prompt-tokens tokens (prefill), tokens/s;
- generation: --gen-tokens single-token decodes (greedy), tokens/s;

after one unrecorded warm-up decode. It reports the median over --repeats and the range, and
the ratio without / with repacking. Whether llama.cpp repacked a file at all shows in its log
(SPECDEC_LLAMA_LOG=1 specdec run ...: "cannot be used with preferred buffer type CPU_REPACK").

Run it alone, inside the CPU lock (two llama.cpp processes at once make both crawl):

    flock /tmp/specdec-cpu.lock python3 benchmarks/repack.py
    flock /tmp/specdec-cpu.lock python3 benchmarks/repack.py --repeats 7 --json > repack.json

Left out: GPU offload, other model sizes, and speculative runs (`specdec bench --no-repack`).

Produces docs/benchmarks.md, "What `--no-repack` costs": its table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

TEXT = (
    "The lighthouse keeper climbed the stairs every evening, counting the steps as his father had, "
    "and wrote the weather into a book that nobody read. Ships passed far out, their lights small "
    "and steady, and the sea kept its own time against the rocks below the tower. "
)


def measure_once(path: Path, repack: bool, prompt_ids: list[int], gen_tokens: int, threads: int | None) -> dict:
    import numpy as np

    from specdec_cli.llama.model import LlamaModel

    with LlamaModel(path, n_ctx=1024, n_threads=threads, n_gpu_layers=0, repack=repack) as model:
        model.decode(prompt_ids[:8])  # warm-up: first-call allocations
        model.rewind(0)
        start = time.perf_counter()
        logits = model.decode(prompt_ids)
        prompt_s = time.perf_counter() - start
        token = int(np.argmax(logits[-1]))
        start = time.perf_counter()
        for _ in range(gen_tokens):
            token = int(np.argmax(model.decode([token])[-1]))
        gen_s = time.perf_counter() - start
    return {"prompt_tps": len(prompt_ids) / prompt_s, "gen_tps": gen_tokens / gen_s}


def models(folder: Path) -> list[tuple[str, Path]]:
    from specdec_cli.llama.convert import convert_gguf
    from specdec_cli.models.cache import builtin_pair

    draft, target = builtin_pair(on_convert=lambda dst: print(f"converting the built-in target into {dst} ...", file=sys.stderr))
    found = [("Q4_1 (built-in draft)", draft), ("F32 (built-in target)", target)]
    for file_type in ("Q4_0", "Q8_0"):
        dst = folder / f"SmolLM2-135M-Instruct.{file_type}.gguf"
        start = time.perf_counter()
        convert_gguf(target, dst, file_type)
        print(f"converted F32 -> {file_type} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        found.append((file_type, dst))
    return found


def run(args: argparse.Namespace) -> list[dict]:
    from specdec_cli.llama.model import LlamaModel
    from specdec_cli.llama.platform import system_info

    with tempfile.TemporaryDirectory(prefix="specdec-repack-") as folder:
        rows = []
        for label, path in models(Path(folder)):
            with LlamaModel(path, vocab_only=True) as vocab:
                ids = vocab.tokenize(TEXT * 8, add_special=True)[: args.prompt_tokens]
            runs: dict[bool, list[dict]] = {True: [], False: []}
            for repeat in range(args.repeats):
                for repack in (True, False) if repeat % 2 == 0 else (False, True):
                    runs[repack].append(measure_once(path, repack, ids, args.gen_tokens, args.threads))
                    print(f"{label} repeat {repeat + 1} repack={repack}: {runs[repack][-1]}", file=sys.stderr)
            row = {"model": label, "file": path.name, "prompt_tokens": len(ids), "gen_tokens": args.gen_tokens}
            for repack, name in ((True, "repack"), (False, "no_repack")):
                for figure in ("prompt_tps", "gen_tps"):
                    values = [r[figure] for r in runs[repack]]
                    row[f"{name}_{figure}"] = statistics.median(values)
                    row[f"{name}_{figure}_range"] = [min(values), max(values)]
            rows.append(row)
        return [{"system_info": system_info().strip(), "repeats": args.repeats}] + rows


def table(rows: list[dict]) -> str:
    head, *rows = rows
    out = [
        f"llama.cpp: {head['system_info']}",
        f"medians of {head['repeats']} alternating repeats; ratio = without / with repacking",
        "",
        "| model | prompt t/s with | prompt t/s without | ratio | generation t/s with | generation t/s without | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['model']} "
            f"| {r['repack_prompt_tps']:.0f} | {r['no_repack_prompt_tps']:.0f} | {r['no_repack_prompt_tps'] / r['repack_prompt_tps']:.2f} "
            f"| {r['repack_gen_tps']:.1f} | {r['no_repack_gen_tps']:.1f} | {r['no_repack_gen_tps'] / r['repack_gen_tps']:.2f} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = parser.parse_args()
    rows = run(args)
    print(json.dumps(rows, indent=2) if args.json else table(rows))


if __name__ == "__main__":
    main()
