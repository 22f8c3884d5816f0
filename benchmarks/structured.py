"""Constrained answers, one client: specdec with and without speculation, unconstrained, and llama-server with and without its draft.

Four workloads, --prompts prompts each (WORKLOADS):
  - extract: six fixed keys (a person's name, age, city, email, occupation, active);
  - nested:  an order with a customer, an address and a list of items;
  - form:    six enums and a boolean (a support ticket's fields);
  - tool:    a call to get_weather (tools, tool_choice "required", one call).
For each temperature (--temperatures; T > 0 with llama.cpp's default filters top-k 40, top-p
0.95, min-p 0.05) and each of --repeats repeats, every prompt goes to every server in turn
(the order reversed on odd repeats), so that the machine's drift falls on all alike:

  - specdec:       `specdec serve` (the built-in pair unless --pair), its defaults (k auto),
                   the schema as `response_format` (json_schema, strict) or the tools;
  - specdec-off:   the same server, the same request with "drafter": "none" (speculation off);
  - specdec-free:  the same server and prompt, unconstrained (max_tokens the same);
  - llama-server:  llama.cpp b11434's server (-np 1), the draft (`-md`, `--spec-type
                   draft-simple`, `--spec-draft-sampling probabilistic`, `--spec-draft-n-max`
                   --n-max), the schema as its `json_schema` field; for the tool workload the
                   JSON schema of the call specdec's template family writes (SmolLM2's template
                   knows no tools: llama-server, asked for tools, answers no call);
  - llama-server-nodraft: the same without the draft (`--spec-type none`).

Per (workload, temperature, server): completion tokens over generation seconds (the servers'
own timings.predicted_ms: from the first token's round to the last, prefill excluded, as
llama.cpp reports its eval speed), and over the requests' wall time (prefill included: both
models' prefill where a draft model runs, and whatever prefix each server's cache held); and
the share of specdec's tokens the grammar forced (timings.forced_n). Each message starts with
the request's own number, so that no server finds a whole prompt in its cache (one server
answers specdec, specdec-off and specdec-free). Ratios per repeat, their median
and a 95 % interval (intervals.py): specdec against specdec-off, llama-server and
llama-server-nodraft, and against specdec-free.

    flock /tmp/llama.lock python3 benchmarks/structured.py --llama-server /tmp/llama-build/bin/llama-server --out structured.json

Produces docs/structured.md's table "Constrained answers, one client".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from intervals import ratio_interval, shown  # noqa: E402
from serving import LlamaServer, SpecdecServer, log  # noqa: E402
from serving_batch import post  # noqa: E402

FILTERS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
PEOPLE = [
    "Maria Lopez is 34, lives in Madrid, works as a nurse and writes from maria.lopez@example.com. She is an active member.",
    "Tom Becker, a 52-year-old carpenter from Hamburg (tom.becker@example.org), cancelled his membership last year.",
    "Our new member Aiko Tanaka (aiko@example.jp) is a 27-year-old software engineer based in Osaka.",
    "Pierre Martin, retired teacher, 68, Lyon. Contact: p.martin@example.fr. Membership lapsed.",
]
ORDERS = [
    "Order A-1001 for Jane Doe, 12 High Street, Bristol BS1 4DJ: two notebooks at 3.50 each and one pen at 1.20.",
    "Order B-2002: ship to Carlos Ruiz, Calle Mayor 5, 28013 Madrid. Items: 1 lamp (24.99), 3 bulbs (4.50 each).",
    "Order C-3003 for Li Wei, 88 Nanjing Road, Shanghai 200001: four mugs at 6.00 each.",
    "Order D-4004, customer Anna Novak, Hlavni 12, 110 00 Prague: one backpack (49.90) and two water bottles (12.00 each).",
]
TICKETS = [
    "My invoice for March is wrong and I was charged twice. Please fix this today, I am very upset.",
    "The app crashes when I open settings on Android. Not urgent, just letting you know.",
    "Could you tell me how to export my data to CSV? Thanks a lot, great product!",
    "I cannot log in since yesterday, password reset emails never arrive. I need access for a meeting tomorrow.",
]
CITIES = ["What is the weather in Paris?", "Is it raining in Tokyo right now?", "How cold is it in Oslo today, in fahrenheit?", "Weather for Cape Town please."]

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}, "email": {"type": "string"},
    "occupation": {"type": "string"}, "active": {"type": "boolean"}},
    "required": ["name", "age", "city", "email", "occupation", "active"], "additionalProperties": False}  # fmt: skip
ORDER = {"type": "object", "properties": {
    "order_id": {"type": "string"},
    "customer": {"type": "object", "properties": {"name": {"type": "string"}, "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "postcode": {"type": "string"}},
        "required": ["street", "city", "postcode"], "additionalProperties": False}}, "required": ["name", "address"], "additionalProperties": False},
    "items": {"type": "array", "items": {"type": "object", "properties": {"product": {"type": "string"}, "quantity": {"type": "integer"},
        "unit_price": {"type": "number"}}, "required": ["product", "quantity", "unit_price"], "additionalProperties": False}}},
    "required": ["order_id", "customer", "items"], "additionalProperties": False}  # fmt: skip
TICKET = {"type": "object", "properties": {
    "category": {"enum": ["billing", "technical", "account", "how_to", "feedback"]},
    "priority": {"enum": ["low", "medium", "high", "urgent"]},
    "sentiment": {"enum": ["negative", "neutral", "positive"]},
    "channel": {"enum": ["email", "phone", "chat", "app"]},
    "status": {"enum": ["new", "open", "pending"]},
    "language": {"enum": ["en", "de", "fr", "es"]},
    "needs_human": {"type": "boolean"}},
    "required": ["category", "priority", "sentiment", "channel", "status", "language", "needs_human"], "additionalProperties": False}  # fmt: skip
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}  # fmt: skip
# The generic family's call (grammar/tools.py), as llama-server is asked for it.
CALL = {"type": "object", "properties": {"tool_calls": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
    "type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {**WEATHER["function"]["parameters"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}}}, "required": ["tool_calls"], "additionalProperties": False}  # fmt: skip

WORKLOADS = {  # name: (prompt template, texts, schema or None for the tool call)
    "extract": ("Extract the person's details as JSON (name, age, city, email, occupation, active).\nText: {}", PEOPLE, PERSON),
    "nested": ("Turn this order into JSON with order_id, customer (name, address: street, city, postcode) and items (product, quantity, unit_price).\nOrder: {}", ORDERS, ORDER),
    "form": ("Classify this support ticket as JSON (category, priority, sentiment, channel, status, language, needs_human).\nTicket: {}", TICKETS, TICKET),
    "tool": ("{}", CITIES, None),
}
SERVERS = ("specdec", "specdec-off", "specdec-free", "llama-server", "llama-server-nodraft")
RATIOS = (("specdec", "specdec-off"), ("specdec", "llama-server"), ("specdec", "llama-server-nodraft"), ("specdec", "specdec-free"))


def request(server: str, workload: str, text: str, temperature: float, seed: int, max_tokens: int, number: int) -> dict:
    """The chat request body that `server` gets for one prompt of a workload. Its message starts with
    the request's `number`, so that no server reuses another request's prompt from its cache."""
    template, _, schema = WORKLOADS[workload]
    content = f"(Request {number}.) " + template.format(text)
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": temperature, "seed": seed}
    if temperature > 0:
        body.update(FILTERS)
    if server == "specdec-free":
        return body
    if server.startswith("llama-server"):
        return {**body, "json_schema": schema or CALL}
    if schema is None:
        body.update(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": workload, "schema": schema, "strict": True}}
    return {**body, "drafter": "none"} if server == "specdec-off" else body


def answer(url: str, body: dict) -> dict:
    start = time.perf_counter()
    reply = post(url + "/v1/chat/completions", body)
    wall = time.perf_counter() - start
    message = reply["choices"][0]["message"]
    text = message.get("content") or json.dumps([c["function"] for c in message.get("tool_calls") or []])
    timings = reply.get("timings") or {}
    return {"tokens": reply["usage"]["completion_tokens"], "wall_s": wall, "generation_s": timings["predicted_ms"] / 1e3, "prompt_s": timings["prompt_ms"] / 1e3,
            "forced": timings.get("forced_n", 0), "drafted": timings.get("draft_n", 0), "accepted": timings.get("draft_n_accepted", 0),
            "finish": reply["choices"][0]["finish_reason"], "text": text}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", type=Path, help="llama.cpp b11434's llama-server (its two servers are skipped when not given)")
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per workload (at most 4)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-max", type=int, default=8, help="llama-server's --spec-draft-n-max")
    parser.add_argument("--specdec-args", default="", help="more flags for specdec serve, e.g. '--drafter model+lookup'")
    parser.add_argument("--pair", nargs=2, type=Path, metavar=("DRAFT", "TARGET"), help="default: the built-in pair")
    parser.add_argument("--out", type=Path, default=Path("structured.json"))
    args = parser.parse_args()
    if args.pair:
        draft, target = args.pair
    else:
        from specdec_cli.models.cache import builtin_pair

        draft, target = builtin_pair()
    logs = args.out.with_suffix(".logs")
    logs.mkdir(exist_ok=True)
    servers = [s for s in args.servers if args.llama_server or not s.startswith("llama-server")]
    rows = []
    with contextlib.ExitStack() as stack:
        urls = {}
        flags = ["--draft", str(draft), "--target", str(target), "--ctx", str(args.ctx), "--threads", str(args.threads), *args.specdec_args.split()]
        specdec = stack.enter_context(SpecdecServer(flags, logs / "specdec.log")).url
        urls.update({name: specdec for name in servers if name.startswith("specdec")})
        common = ["-np", "1", "-c", str(args.ctx), "-t", str(args.threads), "--no-webui"]
        if "llama-server" in servers:
            spec = ["--spec-type", "draft-simple", "--spec-draft-sampling", "probabilistic", "--spec-draft-n-max", str(args.n_max)]
            urls["llama-server"] = stack.enter_context(LlamaServer(args.llama_server, draft, target, common + spec, logs / "llama-server.log")).url
        if "llama-server-nodraft" in servers:
            urls["llama-server-nodraft"] = stack.enter_context(LlamaServer(args.llama_server, None, target, common + ["--spec-type", "none"], logs / "llama-server-nodraft.log")).url
        for name, url in urls.items():  # warm each server: its first passes at each shape, each workload's prompt
            for workload in args.workloads:
                answer(url, request(name, workload, WORKLOADS[workload][1][0], 0.0, 0, 16, 0))
        for t in args.temperatures:
            for repeat in range(args.repeats):
                for workload in args.workloads:
                    for i, text in enumerate(WORKLOADS[workload][1][: args.prompts]):
                        for name in servers if repeat % 2 == 0 else servers[::-1]:
                            got = answer(urls[name], request(name, workload, text, t, 1 + i + 100 * repeat, args.max_tokens, len(rows) + 1))
                            rows.append({"server": name, "workload": workload, "temperature": t, "repeat": repeat, "prompt": i, **got})
                log(f"T={t} repeat {repeat + 1}/{args.repeats} done")
                args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    print(report(rows, servers))
    return 0


def rate(rows: list[dict], seconds: str = "generation_s") -> float:
    return sum(r["tokens"] for r in rows) / sum(r[seconds] for r in rows)


def report(rows: list[dict], servers: list[str]) -> str:
    """Both tables (generation, wall), each with tokens/s per server, specdec's forced share, and the ratios with their intervals."""
    return "\n\n".join(f"{title}\n\n" + table(rows, servers, seconds) for title, seconds in
                       (("Generation (prefill excluded)", "generation_s"), ("Wall time per request (prefill included)", "wall_s")))  # fmt: skip


def table(rows: list[dict], servers: list[str], seconds: str) -> str:
    cells = sorted({(r["workload"], r["temperature"]) for r in rows}, key=lambda c: (list(WORKLOADS).index(c[0]), c[1]))
    lines = ["| workload | T | " + " | ".join(f"{s} tok/s" for s in servers) + " | forced | " + " | ".join(f"{a} / {b}" for a, b in RATIOS if a in servers and b in servers) + " |"]
    lines.append("|---|---|" + "---|" * (len(servers) + 1 + sum(a in servers and b in servers for a, b in RATIOS)))
    for workload, t in cells:
        mine = [r for r in rows if (r["workload"], r["temperature"]) == (workload, t)]
        speeds = [f"{rate([r for r in mine if r['server'] == s], seconds):.1f}" for s in servers]
        ours = [r for r in mine if r["server"] == "specdec"]
        forced = f"{sum(r['forced'] for r in ours) / max(1, sum(r['tokens'] for r in ours)):.0%}"
        ratios = []
        for a, b in RATIOS:
            if a in servers and b in servers:
                per = [rate([r for r in mine if r["server"] == a and r["repeat"] == k], seconds) / rate([r for r in mine if r["server"] == b and r["repeat"] == k], seconds)
                       for k in sorted({r["repeat"] for r in mine})]  # fmt: skip
                ratios.append(f"{statistics.median(per):.2f}x" + (f" ({shown(ratio_interval(per))})" if len(per) > 1 else ""))
        lines.append(f"| {workload} | {t:g} | " + " | ".join(speeds) + f" | {forced} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
