"""The target over llama.cpp's RPC backend at several network delays: target-only, fixed k and auto.

A ggml-rpc-server (benchmarks/build_rpc_server.sh) runs on 127.0.0.1, and delay_proxy.py sits
in front of it, adding a fixed delay each way (0, 1 and 5 ms: round trips of 0, 2 and 10 ms
more than loopback's). For each delay the pair is loaded once (the draft here, the target's
layers on the server through the proxy) and every configuration decodes the same prompts in
turn, interleaved prompt by prompt: target-only, speculative at k 2, 4, 8 and 16, and -k auto.
Each `auto` call goes on from what the one before it learnt (tuning/chain.TunedPolicies), as each
request of `specdec serve` starts from the costs and acceptance of those before it; the table
counts the calls after the first, and reports auto against the best fixed k on the first
call apart (a one-off `specdec run`: auto learns the costs and the acceptance within it).

Reported per delay and configuration: decode tokens/s (prefill excluded), the speed-up over
target-only at that delay, the mean k (what auto settled on), and the bytes that crossed the
proxy per generated token (both ways, decoding only).

    flock /tmp/llama.lock python3 benchmarks/rpc.py --out /tmp/rpc.json
    flock /tmp/llama.lock python3 benchmarks/rpc.py --temperature 0.8 --out /tmp/rpc08.json
    flock /tmp/llama.lock python3 benchmarks/rpc.py --extra 60 --out /tmp/rpc_d.json   # the deepened target

Both processes share this machine's cores: the server computes while the client waits for
it, and the draft runs while the server waits. On two machines the draft and the target
would overlap nothing either (a round is draft, then verify), so the ratios carry over, but
not the absolute rates.

Produces docs/rpc.md, "Measured: the target through RPC at 0, 2 and 10 ms round trips": its two tables.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import specdec_cli  # noqa: E402,F401  before numpy: see specdec_cli/__init__.py

from delay_proxy import DelayProxy  # noqa: E402
from specdec_cli.decoding.consume import consume  # noqa: E402
from specdec_cli.decoding.engine import GenerationConfig  # noqa: E402
from specdec_cli.decoding.stats import RunStats  # noqa: E402
from specdec_cli.llama import rpc  # noqa: E402
from specdec_cli.maths.sampling import SamplingParams  # noqa: E402
from specdec_cli.models.cache import builtin_pair  # noqa: E402
from specdec_cli.prompts import builtin_prompts  # noqa: E402
from specdec_cli.session import LoadOptions, open_pair  # noqa: E402
from specdec_cli.tuning.chain import TunedPolicies  # noqa: E402

CONFIGS = [("target-only", None), ("k=2", 2), ("k=4", 4), ("k=8", 8), ("k=16", 16), ("auto", "auto")]


def start_server(binary: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", "2"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    endpoint = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            rpc.probe(endpoint, timeout=2)
            return server, endpoint
        except rpc.RpcError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def summarise(totals: dict[str, RunStats], crossed: dict[str, int]) -> dict:
    """Each configuration's figures (tokens/s, speed-up over target-only, mean k, bytes per token)
    and the best fixed k, from RunStats merged over some prompts."""
    base = totals["target-only"].tokens_per_second
    rows = {}
    for name, _ in CONFIGS:
        t = totals[name]
        rows[name] = {
            "tokens_per_second": round(t.tokens_per_second, 2), "speedup": round(t.tokens_per_second / base, 3),
            "mean_k": round(t.mean_k, 2), "tokens_per_pass": round(t.tokens_per_pass, 2),
            "bytes_per_token": round(crossed[name] / max(t.new_tokens, 1)),
        }  # fmt: skip
    best = max((n for n, k in CONFIGS if isinstance(k, int)), key=lambda n: rows[n]["tokens_per_second"])
    return {"rows": rows, "best_fixed": best, "auto_vs_best": round(rows["auto"]["tokens_per_second"] / rows[best]["tokens_per_second"], 3)}


def measure(args: argparse.Namespace) -> dict:
    draft, target = builtin_pair()
    if args.extra:
        from synthetic_pair import deepened_target

        target = deepened_target(args.extra)
    binary = Path(subprocess.run(["bash", str(Path(__file__).parent / "build_rpc_server.sh")], capture_output=True, text=True, check=True).stdout.split()[-1])
    server, endpoint = start_server(binary)
    prompts = [p.text for p in builtin_prompts()][: args.prompts + 1]
    out = {"temperature": args.temperature, "max_tokens": args.max_tokens, "prompts": len(prompts) - 1, "extra": args.extra, "delays": {}}
    try:
        for delay_ms in args.delays:
            with DelayProxy(rpc.address(endpoint), delay_ms / 1e3) as proxy:
                options = LoadOptions(n_ctx=2048, rpc=(proxy.endpoint,))
                with open_pair(draft, target, options) as pair:
                    # calls[0]: every configuration's first call; calls[1]: the later ones, which the table shows
                    calls = [({name: RunStats() for name, _ in CONFIGS}, {name: 0 for name, _ in CONFIGS}) for _ in range(2)]
                    tuned = TunedPolicies()  # auto's later calls go on from its earlier ones, as the server's requests do
                    for i, text in enumerate(prompts):
                        ids = pair.prompt_tokens(text, chat=True)
                        config = GenerationConfig(max_tokens=args.max_tokens, sampling=SamplingParams(temperature=args.temperature), seed=i)
                        totals, crossed = calls[min(i, 1)]
                        for name, k in CONFIGS:
                            engine = pair.engine(speculative=k is not None)
                            events = engine.generate(ids, config, tuned.policy(k) if k is not None else None)
                            before = proxy.sent + proxy.received
                            outcome = consume(events)
                            crossed[name] += proxy.sent + proxy.received - before
                            totals[name] = totals[name].merge(outcome.stats)
                    first, later = (summarise(*c) for c in calls)
                    out["delays"][str(delay_ms)] = {**later, "first_call": first}
                    rows = later["rows"]
                    print(f"delay {delay_ms} ms each way: " + ", ".join(f"{n} {r['tokens_per_second']:.1f} tok/s" for n, r in rows.items()), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(30)
    return out


def print_table(result: dict) -> None:
    print(f"T = {result['temperature']}, {result['prompts']} prompts x {result['max_tokens']} tokens after a first call" + (f", deepened +{result['extra']}" if result["extra"] else ""))
    print("| round trip | " + " | ".join(n for n, _ in CONFIGS) + " | auto's k | auto / best fixed | first call: auto / best fixed | bytes per token (target-only / k=16 / auto) |")
    print("|---" * (len(CONFIGS) + 5) + "|")
    for delay, d in result["delays"].items():
        rows, first = d["rows"], d["first_call"]
        cells = [f"{rows['target-only']['tokens_per_second']:.1f} tok/s"] + [f"{rows[n]['speedup']:.2f}x" for n, _ in CONFIGS[1:]]
        bytes_ = " / ".join(f"{rows[n]['bytes_per_token']:,}" for n in ("target-only", "k=16", "auto"))
        print(f"| {2 * float(delay):g} ms | " + " | ".join(cells) + f" | {rows['auto']['mean_k']:.1f} | {d['auto_vs_best']:.2f} ({d['best_fixed']}) | {first['auto_vs_best']:.2f} ({first['best_fixed']}) | {bytes_} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0, 1, 5], help="milliseconds added each way (default 0 1 5)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", "-n", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4, help="how many of the built-in prompts the table counts, after a first one")
    parser.add_argument("--extra", type=int, default=0, help="deepen the built-in target by N zero blocks (synthetic_pair.py)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
