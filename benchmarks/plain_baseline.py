"""The honest baseline: specdec's target-only decoding, fresh and warm, against llama-server's.

On the built-in pair (or --draft/--target), each of auto_record.PROMPTS is generated five ways,
--max-tokens tokens at temperature --temperature (0 by default), seed 1, the prompt sent as one
user turn through the target's chat template (what `specdec run` does by default):

  a. `specdec run --drafter none --json`: a fresh process per prompt, as a shell runs it;
  b. `specdec run -k K --baseline --json`: a fresh process per prompt (the README's main job):
     its speculative tokens/s, the target-only decode it runs in turns with it in the same
     process (`baseline_tokens_per_second`) and the speed-up it prints (`speedup`);
  c. `specdec serve --drafter none` (speculation off): one server, chat requests;
  d. `specdec serve -k K` (speculation on): one server, chat requests;
  e. llama.cpp's llama-server without a draft (--llama-args: -t 2, one slot), chat requests.
     llama.cpp b11434's, built as docs/serving.md says (--llama-server: its path); its
     `--version` goes into the JSON.

`run`'s processes get SPECDEC_NO_TUNING_CACHE=1. Each server is started once before the loop
and answers one warm-up request (another prompt) first. A server that waits for a request uses
no CPU (checked with /proc: its threads sleep, idle and right after a request), so the three
stay up together and the ways are measured in turns, prompt by prompt, their order
reversed every other time, --repeats times over the prompts: the machine's drift falls on all
of them alike.

A way's speed is its generated tokens over its generation seconds (prefill and loading
excluded), summed over prompts and repeats: for `run` the stats' new_tokens and
generation_seconds; for both servers the reply's `timings.predicted_n` and `predicted_ms`
(llama-server's generation time after prompt processing; specdec serve fills them from the same
statistics `run` reports). (b)'s baseline seconds are its new tokens over
`baseline_tokens_per_second` (the JSON lacks the baseline's own count; at T = 0 both decodes
write the same tokens).
Reported per way: tokens/s, its ratio to llama-server's and, with two repeats or more, a 95 %
interval for that ratio across the prompts (intervals.across_interval, each prompt a group of
its repeats' side-by-side ratios); then (b)'s mean printed speed-up next to the warm server's
(d) / (c). Texts are compared with (a)'s: at T = 0 every way should write the same.

    flock /tmp/llama.lock python3 benchmarks/plain_baseline.py --out plain.json
    flock /tmp/llama.lock python3 benchmarks/plain_baseline.py --max-tokens 128 512 \\
        --llama-server /tmp/llama-build/bin/llama-server --out plain.json

prints one markdown row per length and way: tokens, way, tokens/s, its ratio to llama-server's
(with the interval), texts equal to (a)'s. For the form (figures from a 2-prompt trial only):

    | 32 | c. `specdec serve --drafter none`, warm | 44.9 | 1.00 (95 %: 0.38-2.55) | 4/4 |

Left out: GPUs, several clients (serving_batch.py), `-k auto`, prompt processing. The first
request a fresh llama-server or specdec serve answers is slower; the warm-up hides it on
purpose: (a) and (b) are the cold side.

Produces docs/benchmarks.md, "The plain baseline".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from auto_record import PROMPTS, builtin  # noqa: E402
from intervals import across_interval, shown  # noqa: E402
from serving import ROOT, LlamaServer, SpecdecServer, machine  # noqa: E402

WARM_UP = "Say hello in three languages."
FILTERS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}  # run's defaults and llama-server's, said aloud to both servers
PAUSE_S = 0.5  # between two measurements: any spinning thread of the last one has stopped
RUN_A, RUN_B, BASE_B, SERVE_C, SERVE_D, LLAMA_E = "a", "b", "b baseline", "c", "d", "e"
NAMES = {
    RUN_A: "a. `specdec run --drafter none`, fresh",
    RUN_B: "b. `specdec run -k {k} --baseline`, fresh: speculative",
    BASE_B: "b. the same process's target-only baseline",
    SERVE_C: "c. `specdec serve --drafter none`, warm",
    SERVE_D: "d. `specdec serve -k {k}`, warm",
    LLAMA_E: "e. llama-server, no draft, warm",
}


def log(message: str) -> None:
    print(f"plain_baseline.py: {message}", file=sys.stderr, flush=True)


# -- one measurement of each kind ------------------------------------------------------------------


def run_once(args, prompt: str, max_tokens: int, *flags: str) -> dict:
    """One fresh `specdec run ... --json`: its stats and text, and the process's wall time."""
    argv = [sys.executable, "-m", "specdec_cli.cli", "run", "--draft", str(args.draft), "--target", str(args.target),
            "--temperature", str(args.temperature), "-n", str(max_tokens), "--seed", "1", "--ctx", str(args.ctx),
            "--threads", str(args.threads), "--json", "--no-stats", *flags, prompt]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPECDEC_NO_TUNING_CACHE="1", NO_COLOR="1")
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=args.request_timeout, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"specdec run {' '.join(flags)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    reply = json.loads(done.stdout)
    return {"stats": reply["stats"], "text": reply["text"], "wall_s": wall}


def run_plain(args, prompt: str, max_tokens: int) -> dict:
    """(a): target-only, fresh process."""
    r = run_once(args, prompt, max_tokens, "--drafter", "none")
    s = r["stats"]
    return {RUN_A: {"tokens": s["new_tokens"], "seconds": s["generation_seconds"], "prompt_tokens": s["prompt_tokens"], "wall_s": r["wall_s"], "text": r["text"]}}


def run_speculative(args, prompt: str, max_tokens: int) -> dict:
    """(b): speculative, then target-only in the same process (--baseline); two rows and the printed speed-up."""
    r = run_once(args, prompt, max_tokens, "-k", str(args.k), "--baseline")
    s = r["stats"]
    base_rate = s["baseline_tokens_per_second"]
    row = {"tokens": s["new_tokens"], "seconds": s["generation_seconds"], "prompt_tokens": s["prompt_tokens"], "wall_s": r["wall_s"], "text": r["text"],
           "speedup": s["speedup"], "acceptance": s.get("acceptance_rate")}  # fmt: skip
    base = {"tokens": s["new_tokens"], "seconds": s["new_tokens"] / base_rate if base_rate else 0.0, "prompt_tokens": s["prompt_tokens"]}
    return {RUN_B: row, BASE_B: base}


def ask(url: str, args, prompt: str, max_tokens: int) -> dict:
    """One chat request (not streamed) to either server: generated tokens and generation seconds from its timings."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": args.temperature, "seed": 1,
            **FILTERS, "stream": False}  # fmt: skip
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=args.request_timeout) as reply:
        data = json.loads(reply.read())
    wall = time.perf_counter() - start
    t, u = data.get("timings") or {}, data.get("usage") or {}
    if "predicted_ms" in t:
        tokens, seconds = t["predicted_n"], t["predicted_ms"] / 1e3
    else:  # no timings: completion tokens over the request's wall time (prefill included; said in the JSON)
        tokens, seconds = u["completion_tokens"], wall
    drafted = t.get("draft_n") or 0
    return {"tokens": tokens, "seconds": seconds, "from_timings": "predicted_ms" in t, "prompt_tokens": u.get("prompt_tokens"), "wall_s": wall,
            "text": data["choices"][0]["message"]["content"], "acceptance": t.get("draft_n_accepted", 0) / drafted if drafted else None}  # fmt: skip


# -- the loop --------------------------------------------------------------------------------------


def measure(args, servers: dict) -> list[dict]:
    """Every way on every prompt, --repeats times, in turns; one record per way and prompt."""
    def way_calls(prompt: str, n: int) -> list:
        calls = [lambda: run_plain(args, prompt, n), lambda: run_speculative(args, prompt, n)]
        calls += [lambda way=way, url=url: {way: ask(url, args, prompt, n)} for way, url in servers.items()]
        return calls

    records, turn = [], 0
    for repeat in range(args.repeats):
        for i, prompt in enumerate(PROMPTS[: args.prompts]):
            for n in args.max_tokens:
                calls = way_calls(prompt, n)
                for call in calls if turn % 2 == 0 else calls[::-1]:
                    time.sleep(PAUSE_S)
                    for way, row in call().items():
                        records.append({"way": way, "repeat": repeat, "prompt": i, "max_tokens": n, **row})
                turn += 1
                done = {r["way"]: r["tokens"] / r["seconds"] for r in records[-(len(calls) + 1) :] if r["seconds"]}
                log(f"repeat {repeat + 1}, prompt {i + 1}, {n} tokens: " + ", ".join(f"{w} {v:.1f}" for w, v in done.items()) + " tokens/s")
    return records


# -- the summary -----------------------------------------------------------------------------------


def summarise(records: list[dict], args) -> dict:
    """Per length and way: tokens/s over all its records, the ratio to llama-server's, its interval; the speed-ups."""
    out = {}
    for n in args.max_tokens:
        mine = [r for r in records if r["max_tokens"] == n]
        ways = sorted({r["way"] for r in mine}, key=list(NAMES).index)
        rate = {w: sum(r["tokens"] for r in mine if r["way"] == w) / sum(r["seconds"] for r in mine if r["way"] == w) for w in ways}
        cell = {(r["way"], r["prompt"], r["repeat"]): r for r in mine}
        plain = {(r["prompt"], r["repeat"]): r for r in mine if r["way"] == RUN_A}
        rows = {}
        for w in ways:
            row = {"tokens_per_second": rate[w], "tokens": sum(r["tokens"] for r in mine if r["way"] == w)}
            if w != LLAMA_E:
                row["of_llama_server"] = rate[w] / rate[LLAMA_E]
                groups = [[cell[w, p, k]["tokens"] / cell[w, p, k]["seconds"] / (cell[LLAMA_E, p, k]["tokens"] / cell[LLAMA_E, p, k]["seconds"])
                           for k in range(args.repeats)] for p in range(args.prompts)]  # fmt: skip
                found = across_interval(groups)
                row["of_llama_server_interval"] = None if found is None else found[1:]
            if any(r["prompt_tokens"] != plain[r["prompt"], r["repeat"]]["prompt_tokens"] for r in mine if r["way"] == w):
                log(f"{n} tokens, way {w}: a prompt's token count differs from (a)'s (another chat template rendering?); see the records")
            texts = [(r["text"], plain[r["prompt"], r["repeat"]]["text"]) for r in mine if r["way"] == w and "text" in r]
            if texts:
                row["same_text_as_a"] = [sum(a == b for a, b in texts), len(texts)]
            rows[w] = row
        speedups = [r["speedup"] for r in mine if r["way"] == RUN_B]
        out[str(n)] = {
            "ways": rows,
            "run_printed_speedup_mean": sum(speedups) / len(speedups),
            "run_speedup_of_sums": rate[RUN_B] / rate[BASE_B],
            "warm_server_speedup": rate[SERVE_D] / rate[SERVE_C],
        }
    return out


def table(summary: dict, args) -> str:
    lines = [f"{args.prompts} prompts x --repeats {args.repeats}, T = {args.temperature:g}, seed 1, k = {args.k}", "",
             "| tokens | way | tokens/s | of llama-server | same text as (a) |", "|---|---|---|---|---|"]  # fmt: skip
    for n, s in summary.items():
        for w, row in s["ways"].items():
            ratio = f"{row['of_llama_server']:.2f}" if w != LLAMA_E else "1"
            interval = shown(row.get("of_llama_server_interval"))
            same = f"{row['same_text_as_a'][0]}/{row['same_text_as_a'][1]}" if "same_text_as_a" in row else "-"
            lines.append(f"| {n} | {NAMES[w].format(k=args.k)} | {row['tokens_per_second']:.1f} | {ratio}{f' ({interval})' if interval else ''} | {same} |")
    lines += ["", "| tokens | `run --baseline` prints (mean) | its tokens/s over its baseline's | warm servers (d) / (c) |", "|---|---|---|---|"]
    for n, s in summary.items():
        lines.append(f"| {n} | {s['run_printed_speedup_mean']:.2f} | {s['run_speedup_of_sums']:.2f} | {s['warm_server_speedup']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Example: flock /tmp/llama.lock python3 benchmarks/plain_baseline.py --out plain.json")
    parser.add_argument("--draft", type=Path, help="the draft GGUF (default: the built-in pair's)")
    parser.add_argument("--target", type=Path, help="the target GGUF (default: the built-in pair's)")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[128], help="tokens per prompt; several lengths are measured in turns, e.g. 128 512 (default 128)")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"the first N of auto_record.PROMPTS (default {len(PROMPTS)})")
    parser.add_argument("--repeats", type=int, default=2, help="passes over the prompts (default 2; 2 or more give the intervals)")
    parser.add_argument("--temperature", type=float, default=0.0, help="every way's temperature (default 0)")
    parser.add_argument("-k", type=int, default=8, help="draft tokens per round of (b) and (d) (default 8)")
    parser.add_argument("--ctx", type=int, default=2048, help="context of every way (default 2048)")
    parser.add_argument("--threads", type=int, default=2, help="threads of specdec's ways (default 2; --llama-args sets llama-server's)")
    parser.add_argument("--llama-server", type=Path, default=Path("/tmp/llama-build/bin/llama-server"), help="llama.cpp's llama-server binary (default %(default)s)")
    parser.add_argument("--llama-args", default="-c 2048 -t 2 -tb 2 -np 1", help="llama-server's options besides -m, --host, --port (default: %(default)s)")
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds one request or one run may take (default 600)")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/specdec-plain-baseline-logs"), help="the servers' stderr (default %(default)s)")
    parser.add_argument("--out", type=Path, help="write the records and the summary here as JSON")
    args = parser.parse_args()
    if not 1 <= args.prompts <= len(PROMPTS) or args.repeats < 1:
        parser.error(f"--prompts takes 1..{len(PROMPTS)}, --repeats at least 1")
    if (args.draft is None) != (args.target is None):
        parser.error("give both --draft and --target, or neither (the built-in pair)")
    if args.draft is None:
        args.draft, args.target = builtin()
    import specdec_cli  # noqa: F401  (llama.cpp's libraries before numpy, as README says; machine() imports llama_cpp)

    args.logs.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "draft": str(args.draft), "target": str(args.target), "prompts": PROMPTS[: args.prompts],
               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}  # fmt: skip
    common = ["--draft", str(args.draft), "--target", str(args.target), "--ctx", str(args.ctx), "--threads", str(args.threads)]
    servers = {}
    with contextlib.ExitStack() as stack:  # the servers stop, in reverse order, however the loop ends
        servers[SERVE_C] = stack.enter_context(SpecdecServer([*common, "--drafter", "none"], args.logs / "serve-off.log"))
        servers[SERVE_D] = stack.enter_context(SpecdecServer([*common, "-k", str(args.k)], args.logs / "serve-k.log"))
        version = subprocess.run([str(args.llama_server), "--version"], capture_output=True, text=True, timeout=60)
        results["llama_server_version"] = (version.stdout + version.stderr).strip()
        servers[LLAMA_E] = stack.enter_context(LlamaServer(args.llama_server, None, args.target, args.llama_args.split(), args.logs / "llama-server.log"))
        results["commands"] = {way: server.command for way, server in servers.items()}
        for way, server in servers.items():
            log(f"warming {way} up")
            ask(server.url, args, WARM_UP, max(args.max_tokens))
        records = measure(args, {way: server.url for way, server in servers.items()})
    results["records"] = records
    results["summary"] = summarise(records, args)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        log(f"wrote {args.out}")
    print(table(results["summary"], args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
