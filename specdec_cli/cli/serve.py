"""`specdec serve`: the loaded pair behind OpenAI's API and the page, until Ctrl-C or SIGTERM.

    specdec serve                                        # built-in pair on http://127.0.0.1:8080
    specdec serve --draft tiny.gguf --target big.gguf --port 9000 --api-key "$KEY"
    specdec serve --api-key-file keys.txt --cors-origin http://localhost:3000 --request-timeout 120
    curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \
        -d '{"messages":[{"role":"user","content":"Hi"}]}'

It takes `run`'s model, context, sampling and drafting options: the sampling ones are the
defaults of a request that gives none. Paths are resolved and checked (and the built-in
target converted) before the port opens; the models then load behind it (/health: 503, then
200). stderr says `specdec: listening on http://127.0.0.1:8080 (model NAME)` once the port
is open, then one line per request. Ctrl-C or SIGTERM cancels the generation in flight
(at most `GRACE_SECONDS` after the last byte is due), and the command exits 0.

`--slots N` requests generate at once: their rows share each pass of both models
(serve/worker.py, decoding/batch.py); each has --ctx tokens of context, and the memory check
covers all of them. By default as many as fit (`default_slots`): a slot's KV caches at --ctx in
both models, read from the GGUF headers, within half the free memory, up to 16; 4 where layers
are on a GPU or RPC servers, whose memory this does not read. stderr says how many and why.

`--pass-timeout SECONDS`: a pass of either model that has not returned by then (an RPC server
that stopped answering) ends the server: /health and every request get 503 with the reason,
and the command exits 1, for a supervisor to restart it.

Each `--api-key` (and each line of `--api-key-file`) is a tenant (serve/guard.py): its own
drafting memory and cached prefix. Listening on an address other than loopback without a key
prints a warning, since anyone who reaches the port can then use the models. The admin key
(`--admin-key-file`, or SPECDEC_ADMIN_KEY) is the operator's, no tenant: with keys, /metrics
needs it, and /slots shows it every slot where a tenant's key sees only its own.

Left out: the HTTP side (serve/app.py, serve/server.py), the worker (serve/worker.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import BadInput, SpecdecError
from ..serve.guard import is_loopback, read_key_file
from ..options import DEFAULT_VERIFY, PASS_TIMEOUT
from .options import DraftingFlags, FilterFlags, LoadFlags, ModelFlags, TemperatureOption, VerifyOption, _err, check_common, flag_groups

GRACE_SECONDS = 5  # how long a shutdown waits for streams in flight before cancelling them
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 16
OFFLOADED_SLOTS = 4  # the default slots where KV caches live on a GPU or RPC server (whose free memory is not read)
MAX_SLOTS = 64
DEFAULT_MAX_CONNECTIONS = 64  # open connections answered at once (serve/server.server_config); past it 503


KEY_VARIABLE = "SPECDEC_API_KEY"  # a key given in the environment: the whole value, spaces and all
ADMIN_VARIABLE = "SPECDEC_ADMIN_KEY"  # the admin key, read as SPECDEC_API_KEY is (no --admin-key: keys in argv show in ps)


def api_keys(
    given: list[str] | None, environment: str | None, key_file: Path | None, variable: str = KEY_VARIABLE, file_option: str = "--api-key-file"
) -> list[str]:
    """The server's keys: --api-key (each whole), else SPECDEC_API_KEY's whole value, and the key
    file's lines. An empty key, given or in the variable, is refused rather than leaving the server
    open. The admin's keys are read the same way, from SPECDEC_ADMIN_KEY and --admin-key-file (the
    `variable` and `file_option` the messages name). Example: (None, "correct horse battery staple",
    None) -> ["correct horse battery staple"]."""
    keys = list(given) if given else ([] if environment is None else [environment.strip()])
    if any(not key for key in keys):
        raise BadInput(f"--api-key must not be empty (unset {KEY_VARIABLE} for no key)" if given else f"{variable} must not be empty (unset it for no key)")
    if key_file is not None:
        try:
            keys += read_key_file(key_file)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BadInput(f"{file_option} {key_file}: {getattr(exc, 'strerror', None) or exc}") from None
    return keys


@flag_groups
def serve(
    models: ModelFlags = ModelFlags(),
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Tokens a request generates at most when it gives no max_tokens (the context's room caps it).")] = 256,
    drafting: DraftingFlags = DraftingFlags(),
    temperature: TemperatureOption = 0.8,
    verify: VerifyOption = DEFAULT_VERIFY,
    filters: FilterFlags = FilterFlags(),
    load: LoadFlags = LoadFlags(),
    host: Annotated[str, typer.Option(help="Address to listen on; 127.0.0.1 keeps the server to this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one (printed).")] = DEFAULT_PORT,
    api_key: Annotated[Optional[List[str]], typer.Option(metavar="KEY", help="Require Authorization: Bearer KEY on /v1 and /slots (or set SPECDEC_API_KEY); repeat for several tenants, each with its own drafting memory and cache.")] = None,
    api_key_file: Annotated[Optional[Path], typer.Option(metavar="FILE", help="A file of API keys, one per line (# comments): each a tenant, as --api-key.")] = None,
    admin_key_file: Annotated[Optional[Path], typer.Option(metavar="FILE", help="The operator's keys, one per line (# comments), or set SPECDEC_ADMIN_KEY: with keys, /metrics needs one (every tenant's traffic), and /slots shows it every slot where a tenant's key sees its own.")] = None,
    allowed_host: Annotated[Optional[List[str]], typer.Option(metavar="NAME", help="Another name the Host header may give (a loopback server takes only 127.0.0.1, localhost and [::1]); repeatable.")] = None,
    cors_origin: Annotated[Optional[List[str]], typer.Option(metavar="ORIGIN", help="A web page's origin that may call the API from a browser, e.g. http://localhost:3000; repeatable (others get 403).")] = None,
    request_timeout: Annotated[Optional[float], typer.Option(metavar="SECONDS", help="End a generation that runs longer than SECONDS, with its tokens so far (finish_reason \"length\").")] = None,
    max_connections: Annotated[int, typer.Option(help="Connections answered at once; more get 503.")] = DEFAULT_MAX_CONNECTIONS,
    alias: Annotated[Optional[str], typer.Option(help="The model name the server answers to (default: the target file's name).")] = None,
    queue: Annotated[int, typer.Option(help="Requests that may wait while the slots are busy (at least 1); more get 503 with Retry-After.")] = DEFAULT_QUEUE,
    slots: Annotated[Optional[int], typer.Option(show_default=False, help="Requests generated at once, their rows in one batch (each with --ctx tokens of context). Default: as many as fit, a slot's KV caches at --ctx in both models within half the free memory, up to 16 (4 with layers on a GPU or RPC servers).")] = None,
    pass_timeout: Annotated[float, typer.Option(metavar="SECONDS", help="A model pass that has not returned after SECONDS (an RPC server that stopped answering) ends the server: /health and every request get 503 with the reason, and the command exits 1.")] = PASS_TIMEOUT,
) -> None:
    """Serve the pair over OpenAI's API (chat and completions, streaming) and a live page at /.

    Example: specdec serve --port 8080, then point an OpenAI client at http://127.0.0.1:8080/v1
    """
    from ..serve.types import Defaults

    chosen = drafting.checked()
    verify = check_common(temperature, max_tokens, verify, filters, load)
    if not 0 <= port <= 65535:
        raise BadInput(f"--port must be between 0 and 65535, got {port}")
    if queue < 1:
        raise BadInput(f"--queue must be at least 1, got {queue}")
    if slots is not None and not 1 <= slots <= MAX_SLOTS:
        raise BadInput(f"--slots must be between 1 and {MAX_SLOTS}, got {slots}")
    if not pass_timeout > 0:
        raise BadInput(f"--pass-timeout must be more than 0 seconds, got {pass_timeout:g}")
    if max_connections < 1:
        raise BadInput(f"--max-connections must be at least 1, got {max_connections}")
    if request_timeout is not None and not request_timeout > 0:
        raise BadInput(f"--request-timeout must be more than 0 seconds, got {request_timeout:g}")
    keys = api_keys(api_key, os.environ.get(KEY_VARIABLE), api_key_file)
    admin = api_keys(None, os.environ.get(ADMIN_VARIABLE), admin_key_file, ADMIN_VARIABLE, "--admin-key-file")
    if set(admin) & set(keys):
        raise BadInput("an admin key is also an API key; give the admin a key of its own")
    defaults = Defaults(
        max_tokens=max_tokens,
        sampling=filters.sampling(temperature),
        draft_tokens=chosen.draft_tokens,
        drafter=chosen.drafter,
        p_min=chosen.p_min,
        verify=verify,
    )
    options = load.options(models.pair_name)
    limits = Limits(queue, max_connections, request_timeout, pass_timeout, slots)
    run_server(models.draft, models.target, models.pair_name, options, defaults, chosen.lookup, host, port, keys, allowed_host or [], cors_origin or [], alias, limits, admin_keys=admin)


@dataclass(frozen=True)
class Limits:
    queue: int
    max_connections: int
    request_timeout: float | None
    pass_timeout: float = PASS_TIMEOUT
    slots: int | None = None  # None: default_slots


def run_server(draft, target, pair_name, options, defaults, lookup, host, port, keys, allowed_hosts, cors_origins, alias, limits: Limits, admin_keys=()) -> None:
    from ..serve.app import create_app
    from ..serve.guard import Access
    from ..serve.server import Server, server_config
    from ..serve.worker import Worker
    from ..session import open_pair
    from .options import pair_files

    draft_path, target_path = pair_files(
        draft, target, pair_name, defaults.drafter != "lookup",
        on_convert=lambda dst: _err(f"specdec: converting the built-in target to F32 once, into {dst} ..."),
    )  # fmt: skip
    slots, why = (limits.slots, "--slots") if limits.slots is not None else default_slots(draft_path, target_path, options)
    options = dataclasses.replace(options, slots=slots)
    sock = _listen(host, port)
    name = alias or target_path.name
    bound_host, bound_port = sock.getsockname()[:2]
    if not keys and not is_loopback(host):
        _err(f"specdec: warning: listening on {host} without --api-key: anyone who reaches port {bound_port} can use the models")

    def load(stack: contextlib.ExitStack):
        return stack.enter_context(open_pair(draft_path, target_path, options))

    stalled: list[str] = []

    def gone(reason: str) -> None:  # the watchdog: a pass never returned
        stalled.append(reason)
        server.should_exit = True

    worker = Worker(
        load, queue_size=limits.queue, lookup=lookup, request_timeout=limits.request_timeout, slots=slots,
        pass_timeout=limits.pass_timeout, on_gone=gone, rpc=options.rpc + options.draft_rpc,
    )  # fmt: skip
    access = Access.for_bind(host, bound_port, keys, allowed_hosts, cors_origins, admin_keys)
    app = create_app(worker, defaults, alias=name, access=access)
    logging.getLogger("specdec.access").setLevel(logging.INFO)
    server = Server(server_config(app, limits.max_connections, timeout_graceful_shutdown=GRACE_SECONDS))
    _err(f"specdec: listening on http://{_url_host(bound_host)}:{bound_port} (model {name}, {slots} slots: {why}); loading the models ...")
    worker.start()
    threading.Thread(target=_report_load, args=(worker, server), daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        worker.stop()
        sock.close()
    if worker.load_error is not None:
        raise worker.load_error
    if stalled:
        raise SpecdecError(stalled[0])


def default_slots(draft: Path | None, target: Path, options) -> tuple[int, str]:
    """--slots when not given, and why: as many slots as fit (llama/resources.fit_slots), each
    holding --ctx tokens of the target's KV cache and --draft-ctx of the draft's (f16, per the
    GGUF headers), in half the free memory; OFFLOADED_SLOTS where a model's layers are on a GPU
    or RPC servers. Example: the built-in pair at --ctx 1024, 20 GB free -> (16, "up to 16, ...")."""
    from ..llama.gguf import read_gguf_header
    from ..llama.resources import MAX_AUTO_SLOTS, available_memory, fit_slots, human_size, padded_ctx

    if options.gpu_layers or options.draft_gpu_layers or options.rpc or options.draft_rpc:
        return OFFLOADED_SLOTS, "layers on a GPU or RPC servers, whose memory is not read; pass --slots to choose"
    sides = [(target, options.n_ctx)] + ([(draft, options.draft_ctx or options.n_ctx)] if draft is not None else [])
    per_token = [(header.kv_bytes_per_token if header else None, ctx) for header, ctx in ((read_gguf_header(p), ctx) for p, ctx in sides)]
    if any(size is None for size, _ in per_token):
        return OFFLOADED_SLOTS, "a model's header does not give its KV cache's size; pass --slots to choose"
    per_slot = sum(size * padded_ctx(ctx) for size, ctx in per_token)
    available = available_memory()
    n = fit_slots(per_slot, available)
    free = "memory not known" if available is None else f"{human_size(available)} free"
    return n, f"a slot's KV caches take {human_size(per_slot)}, up to {MAX_AUTO_SLOTS} within half of the {free}"


def _report_load(worker, server) -> None:
    """Say when the models are ready; a load that failed stops the server (its error is the command's)."""
    worker.ready.wait()
    if worker.load_error is not None:
        server.should_exit = True
    else:
        _err("specdec: ready")


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, opened here so that a port in use is one line, not uvicorn's log."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BadInput(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise SpecdecError(f"cannot listen on {host}:{port}: {(exc.strerror or str(exc)).lower()}; pass another --port (0 picks a free one)") from None
    sock.set_inheritable(False)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
