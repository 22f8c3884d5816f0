"""The model work of tests/gpu, one check per fresh process: the test process itself never
loads a model on the device. A driver's crash (lavapipe's queue thread segfaulted under pytest,
docs/benchmarks.md) then fails one check with its exit code and stderr, and the next check
starts clean. Prints one JSON line, the last line of stdout; each finished run is a line on stderr.

    python gpu_child.py greedy DRAFT TARGET --prompts chat,story --runs model:8,lookup:4 [--gpu-layers N] [--draft-gpu-layers N] [--raw]
        {"target_layers": 31, "target_n_layer": 30, "draft_layers": 31, "draft_n_layer": 30,
         "vocab_map": false, "rows": [{"prompt": "chat", "drafter": "model", "k": 8, "tokens": 48, "divergence": null}, ...]}
    python gpu_child.py target-only TARGET --prompts chat,story [--against '{"chat": [...]}']
        {"gpu_offload": true, "layers": 31, "rows": [{"prompt": "chat", "tokens": [...], "divergence": 17,
                                                   "token": "a", "other": "the", "logit_gap": 0.03}, ...]}

The interpreter decides the backend: the Vulkan environment's python for the device, this
machine's own (SPECDEC_CPU_PYTHON) for the CPU-only reference. --against gives another run's
tokens by prompt: where they differ, this backend's logits for its token and the other's, after
the common prefix (how near a tie the flip was).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
import time
from pathlib import Path

import specdec_cli.llama.platform as platform  # first: llama.cpp before numpy (specdec_cli/__init__.py)
from specdec_cli.bench.stats import first_divergence
from specdec_cli.decoding.engine import GenerationConfig
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.prompts import BUILTIN_PROMPTS
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.session import LoadOptions, open_pair
from specdec_cli.decoding.consume import consume

TOKENS = 48
N_CTX = 1024


def prompts(names: str) -> list:
    by_name = {p.name: p for p in BUILTIN_PROMPTS}
    return [by_name[name] for name in names.split(",")]


def parse_runs(text: str) -> list[tuple[str, int | str]]:
    """'model:8,lookup:4,model+lookup:auto' -> [("model", 8), ("lookup", 4), ("model+lookup", "auto")]."""
    runs = []
    for item in text.split(","):
        drafter, k = item.rsplit(":", 1)
        runs.append((drafter, k if k == "auto" else int(k)))
    return runs


START = time.monotonic()


def progress(line: str) -> None:
    """How far the check got, on stderr: a crash's report says which run it was in."""
    print(f"[gpu_child {time.monotonic() - START:6.1f} s] {line}", file=sys.stderr, flush=True)


def greedy(args) -> dict:
    """Target-only greedy tokens per prompt, and each speculative run's first divergence from them."""
    options = LoadOptions(n_ctx=N_CTX, gpu_layers=args.gpu_layers, draft_gpu_layers=args.draft_gpu_layers)
    config = GenerationConfig(max_tokens=TOKENS, sampling=GREEDY)
    rows = []
    with open_pair(Path(args.draft), Path(args.target), options) as pair:
        for prompt in prompts(args.prompts):
            ids = pair.prompt_tokens(prompt.text, chat=not args.raw)
            expected = consume(pair.engine(speculative=False).generate(ids, config)).tokens
            progress(f"{prompt.name}: target-only")
            for drafter, k in parse_runs(args.runs):
                got = consume(pair.engine(drafter=drafter).generate(ids, config, draft_policy(k))).tokens
                rows.append({"prompt": prompt.name, "drafter": drafter, "k": k, "tokens": len(got), "divergence": first_divergence(expected, got)})
                progress(f"{prompt.name}: {drafter} k {k}, divergence {rows[-1]['divergence']}")
        return {
            "target_layers": pair.target.offloaded_layers, "target_n_layer": pair.target.n_layer,
            "draft_layers": pair.draft.offloaded_layers, "draft_n_layer": pair.draft.n_layer,
            "vocab_map": pair.vocab_map is not None, "rows": rows,
        }  # fmt: skip


def target_only(args) -> dict:
    """Target-only greedy tokens per prompt on this interpreter's backend, and where they leave --against's."""
    against = json.loads(args.against) if args.against else {}
    config = GenerationConfig(max_tokens=TOKENS, sampling=GREEDY)
    rows = []
    with open_pair(None, Path(args.target), LoadOptions(n_ctx=N_CTX)) as pair:
        target = pair.target
        for prompt in prompts(args.prompts):
            ids = pair.prompt_tokens(prompt.text)
            tokens = consume(pair.engine(speculative=False).generate(ids, config)).tokens
            row = {"prompt": prompt.name, "tokens": tokens, "divergence": None}
            if prompt.name in against:
                other = against[prompt.name]
                at = row["divergence"] = first_divergence(other, tokens)
                if at is not None and at < min(len(tokens), len(other)):
                    target.rewind(0)
                    logits = target.decode(list(ids) + tokens[:at])[-1]
                    a, b = tokens[at], other[at]
                    row |= {"token": target.piece(a).decode("utf-8", "replace"), "other": target.piece(b).decode("utf-8", "replace"),
                            "logit_gap": float(logits[a] - logits[b])}  # fmt: skip
                    target.rewind(0)
            rows.append(row)
            progress(f"{prompt.name}: target-only, divergence {row['divergence']}")
        return {"gpu_offload": platform.gpu_offload_supported(), "layers": target.offloaded_layers, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    faulthandler.enable()  # a crash prints every thread's Python stack to stderr
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    g = sub.add_parser("greedy")
    g.add_argument("draft")
    g.add_argument("target")
    g.add_argument("--prompts", default="chat,story")
    g.add_argument("--runs", default="model:8,lookup:4,model+lookup:auto")
    g.add_argument("--gpu-layers", type=int, default=None)  # None: every layer on the device
    g.add_argument("--draft-gpu-layers", type=int, default=None)
    g.add_argument("--raw", action="store_true", help="the prompt as it is, not through the chat template")
    t = sub.add_parser("target-only")
    t.add_argument("target")
    t.add_argument("--prompts", default="chat,story")
    t.add_argument("--against", default=None)
    args = parser.parse_args(argv)
    print(json.dumps(greedy(args) if args.mode == "greedy" else target_only(args)))


if __name__ == "__main__":
    main()
