"""llama.cpp's own llama-server with the target over RPC and the draft local, at several delays.

The comparison for benchmarks/rpc.py: the same pair, prompts (the built-in ones through the chat
template), tokens and temperature, and the same delays through delay_proxy.py, but llama.cpp
b11434's llama-server (built with GGML_RPC) against b11434's own rpc-server. For each delay and
each `--spec-draft-n-max` in --n-max (and without a draft), one llama-server is started
(`--rpc PROXY -ngl 99`, the draft kept on the CPU with `-devd none`), the prompts are sent in
turn (the first, as in rpc.py, is not counted: a fresh server's first request warms it up),
and decode tokens/s is read from its `timings` (predicted_n over predicted_ms: prefill
excluded, as rpc.py reports), with the bytes that crossed the proxy per token (of the counted
calls, prefill included).

    cmake -B build ... -DGGML_RPC=ON && cmake --build build --target llama-server ggml-rpc-server -j2
    flock /tmp/llama.lock python3 benchmarks/rpc_llama_server.py --bin /tmp/llama-build/bin --out /tmp/rpc_ls.json

Produces docs/rpc.md's table "Against llama.cpp's llama-server `--rpc`, side by side".
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from delay_proxy import DelayProxy  # noqa: E402
from serving import free_port, stop, wait_healthy  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.prompts import builtin_prompts  # noqa: E402


def start_rpc_server(binary: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", "2"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rpc-server did not start")
            time.sleep(0.2)


def run(args, bin_dir: Path, proxy: DelayProxy, n_max: int | None, prompts: list[str], log_path: Path) -> dict:
    draft, target = builtin_pair()
    port = free_port()
    command = [str(bin_dir / "llama-server"), "-m", str(target), "--rpc", proxy.endpoint, "-ngl", "99", "--host", "127.0.0.1",
               "--port", str(port), "-c", "2048", "-t", "2", "-np", "1", "--no-webui"]  # fmt: skip
    if n_max is not None:
        command += ["-md", str(draft), "-devd", "none", "-ngld", "0", "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max),
                    "--spec-draft-n-min", "0", "--spec-draft-sampling", "probabilistic"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(url, proc)
            tokens = seconds = 0.0
            drafted = accepted = 0
            for i, text in enumerate(prompts):
                body = {"messages": [{"role": "user", "content": text}], "max_tokens": args.max_tokens, "temperature": args.temperature, "seed": 0}
                req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=600) as r:
                    t = json.loads(r.read())["timings"]
                if i == 0:
                    crossed = proxy.sent + proxy.received
                    continue  # the first call is not counted, as in rpc.py
                tokens += t["predicted_n"]
                seconds += t["predicted_ms"] / 1e3
                drafted += t.get("draft_n", 0)
                accepted += t.get("draft_n_accepted", 0)
            crossed = proxy.sent + proxy.received - crossed
        finally:
            stop(proc, "llama-server")
    return {"tokens_per_second": round(tokens / seconds, 2), "tokens": tokens, "drafted": drafted, "accepted": accepted,
            "bytes_per_token": round(crossed / max(tokens, 1))}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", type=Path, required=True, help="b11434's build/bin, with llama-server and ggml-rpc-server (GGML_RPC on)")
    parser.add_argument("--delays", type=float, nargs="+", default=[0, 1, 5], help="ms each way (round trips of twice that)")
    parser.add_argument("--n-max", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--prompts", type=int, default=3, help="how many of the built-in prompts are counted, after a first one")
    parser.add_argument("--out", type=Path, default=Path("rpc_llama_server.json"))
    args = parser.parse_args()
    prompts = [p.text for p in builtin_prompts()][: args.prompts + 1]
    logs = args.out.with_suffix(".logs")
    logs.mkdir(exist_ok=True)
    server, port = start_rpc_server(args.bin / "ggml-rpc-server")
    out = {"temperature": args.temperature, "max_tokens": args.max_tokens, "prompts": len(prompts) - 1, "delays": {}}
    try:
        for delay in args.delays:
            rows = {}
            with DelayProxy(("127.0.0.1", port), delay / 1e3) as proxy:
                for n_max in [None, *args.n_max]:
                    name = "no draft" if n_max is None else f"n_max={n_max}"
                    rows[name] = run(args, args.bin, proxy, n_max, prompts, logs / f"{delay}-{name}.log")
                    print(f"delay {delay} ms each way, {name}: {rows[name]['tokens_per_second']} tok/s, {rows[name]['bytes_per_token']} bytes a token", file=sys.stderr, flush=True)
            base = rows["no draft"]["tokens_per_second"]
            drafted = {k: v for k, v in rows.items() if k != "no draft"}
            best = max(drafted, key=lambda k: drafted[k]["tokens_per_second"])
            out["delays"][str(delay)] = {"rows": rows, "best": best, "best_speedup": round(drafted[best]["tokens_per_second"] / base, 3)}
            args.out.write_text(json.dumps(out, indent=1))
    finally:
        server.terminate()
        server.wait(30)
    print("| round trip | no draft | " + " | ".join(f"n_max {n}" for n in args.n_max) + " | best |")
    print("|---" * (len(args.n_max) + 3) + "|")
    for delay, d in out["delays"].items():
        cells = [f"{d['rows']['no draft']['tokens_per_second']:.1f} tok/s"] + [f"{d['rows'][f'n_max={n}']['tokens_per_second']:.1f}" for n in args.n_max]
        print(f"| {2 * float(delay):g} ms | " + " | ".join(cells) + f" | {d['best']} ({d['best_speedup']:.2f}x) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
