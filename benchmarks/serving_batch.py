"""Many clients at once: aggregate tokens/s, p50/p99 latency and the target's batch, four servers side by side.

For each temperature and each client count (--clients, default 1 2 4 8), every client sends
--requests chat requests in turn (its own prompts, --max-tokens tokens, llama.cpp's default
filters top_k 40, top_p 0.95, min_p 0.05, seed 1 + request). The servers (--servers, default all)
never serve two at once: the specdec ones are started together and take turns, idle while
another serves, for each client count and each of --repeats repeats (every other repeat in
reverse order), and right after them each llama-server, started for that client count and
repeat (its slots are fixed at start), so that the machine's drift, which moves a row by 20 %
within minutes, falls on all of them alike:

  - before:        `specdec serve` of --before, a git worktree of another commit, run with
                   that commit's default slots (or --before-slots): for an A/B, the commit
                   before a change;
  - specdec:       `specdec serve --slots S` (this checkout): every request's rows in one batch;
  - specdec-off:   the same with `--drafter none` (speculation off: what it must never lose to);
  - llama-server:  llama.cpp's server with `-np N` (N = the client count), the draft
                   (`-md`, `--spec-type draft-simple`, `--spec-draft-sampling probabilistic`,
                   `--spec-draft-n-max` --n-max) and without it (`--spec-type none`, no -md);
  - llama-server-same-nodraft: --llama-server-same, a llama-server built from the llama.cpp
                   that the installed llama-cpp-python vendors (the kernels specdec runs),
                   without a draft: the gap between specdec's plain batched path and llama.cpp
                   b11434's splits into what the llama.cpp version gives and what specdec's
                   own serving costs.

Reported per row: aggregate tokens/s (completion tokens over the wall time of the load),
latency p50 and p99 (nearest rank), and for specdec the mean sequences and rows per target
pass, the share of the load's wall time the models spent in passes and the mean time between
two passes (from GET /slots, counted and timed by the batcher), and at the end, per repeat, their
median and a 95 % interval (intervals.py), the ratios in RATIOS of the servers that ran: specdec
against speculation off and against llama-server without a draft, and that gap's two parts.

    flock /tmp/llama.lock python3 benchmarks/serving_batch.py --before /tmp/before \\
        --llama-server /tmp/llama-build/bin/llama-server --out serving_batch.json

Produces docs/serving.md, "Many clients in one batch": its tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from intervals import ratio_interval, shown  # noqa: E402
from serving import LlamaServer, SpecdecServer, log, percentile  # noqa: E402

TOPICS = ["the sea", "a lighthouse", "autumn leaves", "a busy market", "the moon", "a small robot", "a mountain village", "rain on a window",
          "an old library", "a desert road", "a winter morning", "a lost key"]  # fmt: skip
FILTERS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}


def post(url: str, body: dict, headers: dict | None = None, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def load(url: str, clients: int, requests: int, temperature: float, max_tokens: int) -> dict:
    latencies, tokens, errors = [], [0], []
    lock = threading.Lock()

    def client(i: int) -> None:
        for j in range(requests):
            topic = TOPICS[(i * requests + j) % len(TOPICS)]
            body = {"messages": [{"role": "user", "content": f"Write a short story about {topic}."}], "max_tokens": max_tokens,
                    "temperature": temperature, "seed": 1 + j, **FILTERS}  # fmt: skip
            start = time.perf_counter()
            try:
                reply = post(url + "/v1/chat/completions", body)
            except Exception as exc:  # counted, never retried
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                latencies.append(time.perf_counter() - start)
                tokens[0] += reply["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    wall = time.perf_counter() - start
    return {"clients": clients, "tokens_per_s": tokens[0] / wall, "tokens": tokens[0], "wall_s": wall, "p50_s": percentile(latencies, 50),
            "p99_s": percentile(latencies, 99), "answered": len(latencies), "errors": errors}  # fmt: skip


class Passes(NamedTuple):
    """What a specdec server's batcher counted and timed so far (GET /slots)."""

    target: int  # target passes
    sequences: int  # sequences summed over them
    rows: int
    drafting: dict  # the drafting switch's figures by batch size
    busy: float  # seconds in passes, both models
    spans: int  # spans between passes while sequences were joined
    between: float  # their seconds


def passes(url: str) -> Passes | None:
    """The server's counts from /slots; None for a server without it."""
    try:
        report = get(url + "/slots")
    except Exception:
        return None
    held = report["target_passes"]
    between = report.get("between_passes", {"spans": 0, "seconds": 0.0})
    return Passes(sum(held.values()), sum(int(n) * c for n, c in held.items()), report.get("target_rows", 0), report.get("drafting", {}),
                  sum(report.get("busy_seconds", {}).values()), between["spans"], between["seconds"])  # fmt: skip


def specdec_row(name: str, url: str, args, temperature: float, clients: int, repeat: int) -> dict:
    """One load on a running specdec server, with what its batcher counted during the load."""
    before = passes(url)
    row = load(url, clients, args.requests, temperature, args.max_tokens)
    after = passes(url)
    if before is not None and after is not None and after.target > before.target:
        row["sequences_per_pass"] = (after.sequences - before.sequences) / (after.target - before.target)
        row["rows_per_pass"] = (after.rows - before.rows) / (after.target - before.target)
        row["drafting"] = after.drafting
        if after.spans > before.spans:  # a server that times its passes (one before that reports neither)
            row["busy_share"] = (after.busy - before.busy) / row["wall_s"]  # of the load's wall time, in passes of either model
            row["ms_between_passes"] = 1e3 * (after.between - before.between) / (after.spans - before.spans)
    log(f"{name} T={temperature} clients={clients} #{repeat}: {row['tokens_per_s']:.1f} tok/s p50 {row['p50_s']:.2f} s")
    return {"server": name, "temperature": temperature, "repeat": repeat, **row}


def llama_row(name: str, args, binary: Path, draft: Path | None, target: Path, temperature: float, clients: int, repeat: int, logs: Path) -> dict:
    """One load on a llama-server started for it (its slots, -np, are fixed at start)."""
    extra = ["-np", str(clients), "-c", str(args.ctx * clients), "-t", str(args.threads), "--no-webui"]
    if draft is not None:
        extra += ["--spec-type", "draft-simple", "--spec-draft-sampling", "probabilistic", "--spec-draft-n-max", str(args.n_max)]
    with LlamaServer(binary, draft, target, extra, logs / f"{name}-{temperature}-{clients}.log") as server:
        load(server.url, 1, 1, temperature, 8)
        row = load(server.url, clients, args.requests, temperature, args.max_tokens)
    log(f"{name} T={temperature} clients={clients} #{repeat}: {row['tokens_per_s']:.1f} tok/s p50 {row['p50_s']:.2f} s")
    return {"server": name, "temperature": temperature, "repeat": repeat, **row}


def rows_at(temperature: float, specdec: dict[str, tuple[Path, list[str]]], llama: dict[str, tuple[Path, Path | None]], args, logs: Path, target: Path) -> list[dict]:
    """Every server at one temperature: the specdec ones (name: (checkout, flags)) started
    together, each idle while another serves; for each client count and each repeat, each of them
    in turn (every other repeat in reverse order), then each llama-server (name: (binary, its
    draft or None)), so that the machine's drift falls on all of them alike."""
    rows = []
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, (root, flags) in specdec.items():
            flags = ["--ctx", str(args.ctx), "--threads", str(args.threads), "--queue", "64", *flags]
            urls[name] = stack.enter_context(SpecdecServer(flags, logs / f"{name}-{temperature}.log", root=root)).url
            load(urls[name], 1, 1, temperature, 8)  # warm
        for clients in args.clients:
            for repeat in range(args.repeats):
                for name in list(urls) if repeat % 2 == 0 else list(urls)[::-1]:
                    rows.append(specdec_row(name, urls[name], args, temperature, clients, repeat))
                for name, (binary, draft) in llama.items():
                    rows.append(llama_row(name, args, binary, draft, target, temperature, clients, repeat, logs))
    return rows


SERVERS = ("before", "specdec", "specdec-off", "llama-server", "llama-server-nodraft", "llama-server-same-nodraft")
# The ratios printed at the end, where both servers ran: specdec against what it must not lose to,
# and the split of specdec's gap to llama-server without a draft (its own serving, the llama.cpp version).
RATIOS = (
    ("specdec", "specdec-off"),
    ("specdec", "llama-server-nodraft"),
    ("specdec-off", "llama-server-same-nodraft"),
    ("llama-server-same-nodraft", "llama-server-nodraft"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-slots", type=int, help="--slots for 'before' (default: its own default)")
    parser.add_argument("--before", type=Path, help="a checkout of specdec to compare, run with its own default slots (git worktree add DIR COMMIT: the commit before slots for the table, or before a change); needed for 'before'")
    parser.add_argument("--llama-server", type=Path, help="llama.cpp b11434's llama-server (its two servers are skipped when not given)")
    parser.add_argument("--llama-server-same", type=Path, help="a llama-server built from the llama.cpp the installed llama-cpp-python vendors (docs/serving.md, 'Reproduce'); its server is skipped when not given")
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS), help="which servers (default: all)")
    parser.add_argument("--repeats", type=int, default=1, help="measure every server this many times per client count (the specdec ones in turns)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--requests", type=int, default=3, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 0.0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-max", type=int, default=8, help="llama-server's --spec-draft-n-max")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("DRAFT", "TARGET"), help="default: the built-in pair")
    parser.add_argument("--out", type=Path, default=Path("serving_batch.json"))
    args = parser.parse_args()
    if "before" in args.servers and args.before is None:
        parser.error("'before' needs --before DIR (or leave it out of --servers)")
    if args.pair:
        draft, target = args.pair
    else:
        from specdec_cli.models.cache import builtin_pair

        draft, target = builtin_pair()
    pair_flags = ["--draft", str(draft), "--target", str(target)]
    logs = args.out.with_suffix(".logs")
    logs.mkdir(exist_ok=True)
    slots = ["--slots", str(args.slots)]
    specdec_servers = {
        "before": (args.before, pair_flags + (["--slots", str(args.before_slots)] if args.before_slots else [])),
        "specdec": (ROOT, pair_flags + slots),
        "specdec-off": (ROOT, pair_flags + slots + ["--drafter", "none"]),
    }
    chosen = {name: specdec_servers[name] for name in args.servers if name in specdec_servers}
    binaries = {"llama-server": (args.llama_server, draft), "llama-server-nodraft": (args.llama_server, None), "llama-server-same-nodraft": (args.llama_server_same, None)}
    llama = {name: (binary, d) for name, (binary, d) in binaries.items() if binary and name in args.servers}
    rows = []
    for t in args.temperatures:
        rows += rows_at(t, chosen, llama, args, logs, target)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    for r in rows:
        extra = f"  seq/pass {r['sequences_per_pass']:.2f} rows/pass {r['rows_per_pass']:.1f}" if "sequences_per_pass" in r else ""
        if "ms_between_passes" in r:
            extra += f"  in passes {r['busy_share']:.1%}, {r['ms_between_passes']:.2f} ms between"
        print(f"{r['server']:22} T={r['temperature']:.1f} c={r['clients']} #{r['repeat']}: {r['tokens_per_s']:7.1f} tok/s  p50 {r['p50_s']:.2f}  p99 {r['p99_s']:.2f}  answered {r['answered']}{extra}")
    present = {r["server"] for r in rows}
    for mine, other in RATIOS:
        if mine in present and other in present:
            print(against(rows, mine, other))
    return 0


def against(rows: list[dict], mine: str, other: str) -> str:
    """One server's tokens/s over another's per temperature and client count: each repeat's ratio
    (the two measured minutes apart at most), their median, and with several repeats a 95 %
    interval (intervals.py): the one is slower only where the whole interval lies below 1."""
    rate = {(r["server"], r["temperature"], r["clients"], r["repeat"]): r["tokens_per_s"] for r in rows}
    lines = [f"{mine} / {other} (each repeat; median; with several repeats a 95 % interval):"]
    for t, clients in sorted({(r["temperature"], r["clients"]) for r in rows}, key=lambda k: (-k[0], k[1])):
        ratios = [rate[(mine, t, clients, i)] / rate[(other, t, clients, i)] for s, tt, c, i in rate if (s, tt, c) == (mine, t, clients)]
        interval = shown(ratio_interval(ratios))
        lines.append(f"  T={t} clients={clients}: {', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}" + (f"; {interval}" if interval else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
