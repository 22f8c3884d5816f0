"""`specdec serve`'s HTTP side: OpenAI's endpoints, the page, one error shape, one log line.

    POST /v1/chat/completions   chat turns through the target's template (stream or not)
    POST /v1/completions        a raw prompt, as `specdec run --raw`
    GET  /v1/models             the one model, by its alias
    GET  /health                503 while the models load, then 200 (as llama-server); 503 with
                                the reason if they failed to load or cannot serve any more
    GET  /metrics               Prometheus' text format (metrics.py), behind the admin key
    GET  /slots                 the page's slots panel: a tenant's own slots; every slot, the
                                target's passes and the drafting rates with the admin key
    GET  /                      the page (static/index.html, page.js, page.css)

A chat request with tools is planned against the target's chat template here (grammar/tools.py:
the family, the prompt's tools, the grammar, the parser of the answer); constraints are compiled
over the target's vocabulary before the job is queued, so a bad schema, grammar or tool list is
a 400 naming the field, and the server goes on. That work runs in a thread, not on the event loop.

Every request first passes `_Guard` (guard.py's Host and Origin rules, CORS for the origins
--cors-origin allows); /v1 and /slots then need a key when there are keys, and the key is
the request's tenant; what sums up every tenant's traffic needs the admin key (guard.py). With
a tenant's key /slots keeps that tenant's slots alone, e.g. {"slots": [{"slot": 2, "busy": true,
"cached": 40, "rounds": 9, "tokens": 21}]}. A request goes: body (application/json, else 415; size-limited, read
within `BODY_SECONDS`; UTF-8; a JSON object of at most `MAX_JSON_DEPTH` levels whose integers
fit 64 bits) -> typed model (types.py) ->
Settings (options.py's checks) -> a Job for the worker (worker.py) -> what it hands back,
as JSON or server-sent events (wire.py). Handlers never touch a model. Every error leaves
as OpenAI's `{"error": {"message", "type", "param", "code"}}` from `_error_response`, e.g.
400 {"error": {"message": "top_p must be in (0, 1], got 1.5", "type":
"invalid_request_error", "param": "top_p", "code": null}}. stderr gets one line per request:

    specdec: POST /v1/chat/completions 200, 64 tokens, acceptance 0.81, 1234 ms

`Server` is uvicorn's, ending with exit 0 on Ctrl-C or SIGTERM; `server_config` bounds its
connections (`max_connections`: past it 503, past twice it the connection is closed) and
gives each connection `HEADER_SECONDS` to send its request's headers.

Left out: loading and generating (worker.py), the command and its options (cli/serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.resources
import json
import logging
import math
import signal
import time
from typing import AsyncIterator

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import BadInput, GrammarError, SpecdecError
from ..events import Token
from ..grammar import compile as grammars
from ..grammar import tools as tool_calls
from ..options import BadSetting
from .guard import Access, Refused
from .metrics import CONTENT_TYPE as METRICS_TYPE
from .metrics import Metrics
from .types import ChatRequest, CompletionRequest, Defaults, Settings
from .wire import Answer, error_body
from .worker import Done, Failed, InternalError, Job, QueueFull, ShuttingDown, Started, Unavailable, Worker

log = logging.getLogger("specdec")
access = logging.getLogger("specdec.access")  # cli/serve.py turns it on (info level)

MAX_BODY_BYTES = 1 << 20  # 1 MiB: far above any prompt a 2048..131072-token context takes as text per request
RETRY_AFTER_SECONDS = 2
BODY_SECONDS = 30.0  # to read a request's body, once its headers are in
HEADER_SECONDS = 10.0  # for a new connection to send its request's headers
MAX_JSON_DEPTH = 32  # levels of nesting in a body: a chat request needs 4
MAX_INT = 2**63 - 1  # the largest integer a body may hold (in magnitude)
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/slots", "/")  # metrics' labels; others are "other"
PAGE_FILES = {"index.html": "text/html; charset=utf-8", "page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None, headers: dict | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code, self.headers = status, message, type_, param, code, headers


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(error_body(exc.message, exc.type, exc.param, exc.code), status_code=exc.status, headers=exc.headers)


def _from_specdec(exc: SpecdecError) -> ApiError:
    """The one mapping of specdec's errors to HTTP: the client's fault 400, a full queue 503, ours 500."""
    if isinstance(exc, BadSetting):
        return ApiError(400, exc.field_message, param=exc.setting)
    if isinstance(exc, BadInput):
        return ApiError(400, str(exc))
    if isinstance(exc, (QueueFull, ShuttingDown)):
        return ApiError(503, str(exc), "unavailable_error", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, Unavailable):
        return ApiError(503, str(exc), "unavailable_error")
    return ApiError(500, str(exc), "server_error", code="internal_error" if isinstance(exc, InternalError) else None)


class _ClientGone(Exception):
    pass


class _BadJson(Exception):
    """A value json.loads must not build (an integer past MAX_INT, NaN or Infinity)."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > len(str(MAX_INT)) or abs(int(text)) > MAX_INT:
        raise _BadJson(f"an integer in the body is out of range: at most {MAX_INT} in magnitude, got {text[:24]}{'...' if len(text) > 24 else ''}")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadJson(f"a number in the body is out of range: {text[:24]}")
    return value


def _no_constant(name: str):
    raise _BadJson(f"{name} is not JSON")


def _depth(value) -> int:
    """How deeply a parsed JSON value nests, without recursion. Example: {"a": [1, {}]} -> 3."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_body(body: bytes) -> dict:
    """A request body as a JSON object, or ApiError(400) saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the body is not UTF-8 (byte {exc.start} is {body[exc.start]:#04x})") from None
    try:
        value = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except _BadJson as exc:
        raise ApiError(400, str(exc)) from None
    except RecursionError:
        raise ApiError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels, the most accepted", code="too_deep") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(value).__name__}")
    if _depth(value) > MAX_JSON_DEPTH:
        raise ApiError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels, the most accepted", code="too_deep")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "the body holds a string that is not valid Unicode (a lone surrogate escape such as \\ud800)") from None
    return value


def create_app(
    worker: Worker, defaults: Defaults, alias: str, access: Access = Access(), max_body: int = MAX_BODY_BYTES, body_seconds: float = BODY_SECONDS
) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, title="specdec")
    metrics = Metrics(waiting=lambda: worker.waiting, running=lambda: worker.running, decoded=lambda: worker.pair.target.decoded if worker.pair else 0)
    app.add_middleware(_Guard, access=access)
    app.add_middleware(_AccessLog, metrics=metrics)

    # -- the edges: errors, the log line, auth, the body ------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
        return _error_response(ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(ApiError(500, f"internal error: {type(exc).__name__}", "server_error", code="internal_error"))

    def tenant(request: Request) -> str:
        try:
            return access.tenant(request.headers.get("authorization"))
        except Refused as exc:
            raise ApiError(exc.status, exc.message, code=exc.code) from None

    def admin(request: Request) -> None:
        try:
            access.check_admin(request.headers.get("authorization"), request.url.path)
        except Refused as exc:
            raise ApiError(exc.status, exc.message, code=exc.code) from None

    async def read_json(request: Request) -> dict:
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            raise ApiError(415, f"the body must be sent as Content-Type: application/json, not {kind or 'nothing'}", code="unsupported_media_type")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise ApiError(413, f"the body is {int(declared)} bytes; at most {max_body} are accepted", code="body_too_large")
        body = bytearray()
        try:
            async with asyncio.timeout(body_seconds):
                async for piece in request.stream():
                    body += piece
                    if len(body) > max_body:
                        raise ApiError(413, f"the body is over {max_body} bytes, the most accepted", code="body_too_large")
        except TimeoutError:
            raise ApiError(408, f"the body did not arrive within {body_seconds:g} s", code="body_timeout") from None
        return parse_body(bytes(body))

    def ready_or_503() -> None:
        if worker.gone is not None:
            raise ApiError(503, worker.gone, "unavailable_error")
        if not worker.ready.is_set():
            raise ApiError(503, "the models are still loading", "unavailable_error", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    def parse(model_type, value: dict):
        try:
            request = model_type.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first["loc"]) or None
            raise ApiError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None
        if request.model is not None and request.model != alias:
            raise ApiError(404, f"the model {request.model!r} does not exist; this server answers to {alias!r}", param="model", code="model_not_found")
        try:
            return request, Settings.of(request, defaults, worker.grammar_tokenizer())
        except SpecdecError as exc:
            raise _from_specdec(exc) from None

    def chat_job(value: dict, who: str) -> tuple[Job, Settings, object]:
        """A chat request as the worker's Job, its settings and (with tools) the parser of its answer."""
        body, settings = parse(ChatRequest, value)
        try:
            messages = body.conversation()
            tools, parser = None, None
            if settings.tools is not None:
                asked = settings.tools
                plan = tool_calls.plan(messages, list(asked.tools), asked.choice, asked.parallel, worker.chat_template(), worker.special_id)
                if plan.grammar is not None:
                    grammars.check(plan.grammar, worker.grammar_tokenizer())
                messages, tools, parser = plan.messages, plan.tools, plan.parser()
                settings = dataclasses.replace(settings, config=dataclasses.replace(settings.config, grammar=plan.grammar))
        except GrammarError as exc:
            raise _from_specdec(BadSetting("tools", str(exc))) from None
        except SpecdecError as exc:
            raise _from_specdec(exc) from None
        return Job(settings=settings, messages=messages, tools=tools, tenant=who), settings, parser

    # -- the routes -------------------------------------------------------------------------

    @app.get("/health")
    async def health():
        if worker.gone is not None:
            return _error_response(ApiError(503, worker.gone, "unavailable_error"))
        if not worker.ready.is_set():
            return _error_response(ApiError(503, "loading the models", "unavailable_error"))
        return {"status": "ok", "waiting": worker.waiting}

    @app.get("/metrics")
    async def prometheus(request: Request):
        admin(request)
        return Response(metrics.render(), media_type=METRICS_TYPE)

    @app.get("/slots")
    async def slots(request: Request):
        """The page's slots panel: each slot's state and tokens per pass, and how many sequences the
        target passes held; a tenant's key sees its own slots alone (`_own_slots`)."""
        if access.sees_everything(request.headers.get("authorization")):
            return worker.slot_report(None)
        return _own_slots(worker.slot_report(tenant(request)))

    @app.get("/v1/models")
    async def models(request: Request):
        tenant(request)
        return {"object": "list", "data": [{"id": alias, "object": "model", "created": int(started_at), "owned_by": "specdec"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        who = tenant(request)
        ready_or_503()
        value = await read_json(request)
        job, settings, parser = await asyncio.to_thread(chat_job, value, who)  # a constraint compiles in llguidance: off the event loop
        return await answer(request, job, "chat", settings, parser)

    @app.post("/v1/completions")
    async def completions(request: Request):
        who = tenant(request)
        ready_or_503()
        value = await read_json(request)
        body, settings = await asyncio.to_thread(parse, CompletionRequest, value)
        return await answer(request, Job(settings=settings, prompt=body.text(), tenant=who), "completion", settings)

    @app.get("/")
    async def page():
        return _page_file("index.html")

    @app.get("/static/{name}")
    async def static(name: str):
        if name not in PAGE_FILES:
            raise ApiError(404, f"no file {name!r}", code="not_found")
        return _page_file(name)

    # -- one generation -----------------------------------------------------------------------

    class Timing:
        """When a request arrived and when its first token came (for the latency histograms)."""

        def __init__(self) -> None:
            self.arrived = time.perf_counter()
            self.first: float | None = None

        def saw(self, item) -> None:
            if self.first is None and isinstance(item, Token):
                self.first = time.perf_counter() - self.arrived

        def done(self, request: Request, item: Done, cached_tokens: int) -> None:
            request.state.stats = item.outcome.stats
            metrics.finished(item.outcome.stats, cached_tokens, self.first, time.perf_counter() - self.arrived)

    async def answer(request: Request, job: Job, kind: str, settings: Settings, parser=None):
        timing = Timing()
        try:
            worker.submit(job, asyncio.get_running_loop())
        except SpecdecError as exc:
            raise _from_specdec(exc) from None
        try:
            first = await next_item(request, job)
        except _ClientGone:
            return Response(status_code=499)
        if isinstance(first, Failed):
            raise _from_specdec(first.error)
        assert isinstance(first, Started), first
        reply = Answer(kind=kind, model=alias, settings=settings, cached_tokens=first.cached_tokens, parser=parser, spell=worker.special_text)
        if settings.stream:
            return StreamingResponse(stream(request, job, reply, timing), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            while True:
                item = await next_item(request, job)
                if isinstance(item, Failed):
                    raise _from_specdec(item.error)
                timing.saw(item)
                if isinstance(item, Done):
                    timing.done(request, item, reply.cached_tokens)
                    return reply.final(item.outcome)
                reply.collect(item)
        except _ClientGone:
            return Response(status_code=499)

    async def stream(request: Request, job: Job, reply: Answer, timing: Timing) -> AsyncIterator[str]:
        try:
            opening = reply.opening()
            if opening is not None:
                yield _sse(opening)
            while True:
                item = await next_item(request, job)
                if isinstance(item, Failed):  # after the 200 went out: an error event, as OpenAI sends one
                    yield _sse(error_body(str(item.error), "server_error"))
                    break
                timing.saw(item)
                if isinstance(item, Done):
                    timing.done(request, item, reply.cached_tokens)
                    for chunk in reply.closing(item.outcome):
                        yield _sse(chunk)
                    break
                chunk = reply.chunk_for(item)
                if chunk is not None:
                    yield _sse(chunk)
            yield "data: [DONE]\n\n"
        except _ClientGone:
            pass
        finally:
            job.cancel()  # a no-op once Done; otherwise the worker stops within one round

    async def next_item(request: Request, job: Job):
        """The worker's next item for this job; a client that went away cancels the job."""
        if not job.items.empty():  # a round's items come together: only the first waits (wait_for's task and timer cost more than the item)
            return job.items.get_nowait()
        while True:
            try:
                return await asyncio.wait_for(job.items.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    raise _ClientGone from None

    started_at = time.time()
    return app


class Server(uvicorn.Server):
    """uvicorn's server, except that Ctrl-C and SIGTERM end it as a finished command (exit 0).

    uvicorn raises the signal again once it has shut down, so the process "dies by SIGTERM"
    (143 to a supervisor); here the handlers only ask it to stop (a second Ctrl-C: at once).
    """

    @contextlib.contextmanager
    def capture_signals(self):
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def server_config(app, max_connections: int, header_seconds: float = HEADER_SECONDS, **kw) -> uvicorn.Config:
    """uvicorn's settings for `app`: at most `max_connections` answered at once, and a deadline
    for each connection's request headers (a client that trickles them is cut off)."""

    class Bounded(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > 2 * max_connections:  # far past the bound: not even a 503
                transport.close()
                return
            self._headers_due()

        def on_response_complete(self) -> None:
            self.answered = getattr(self, "answered", 0) + 1
            super().on_response_complete()
            self._headers_due()  # the next request on this connection gets the same deadline

        def _headers_due(self) -> None:
            self.loop.call_later(header_seconds, self._check_headers, getattr(self, "answered", 0))

        def _check_headers(self, answered: int) -> None:
            # Still no complete request line and headers (h11 waits in IDLE until they are in),
            # and no response on this connection since the deadline was set: cut it off.
            if self.conn.their_state is h11.IDLE and getattr(self, "answered", 0) == answered and not self.transport.is_closing():
                self.transport.close()

    return uvicorn.Config(app, http=Bounded, limit_concurrency=max_connections, log_level="warning", access_log=False, lifespan="off", **kw)


def _own_slots(report: dict) -> dict:
    """slot_report for one tenant, less what the others' traffic makes up: only its own slots, and
    none of the server's passes, busy seconds or drafting rates. Whatever slot_report adds later
    stays out too, until it is named here."""
    return {"slots": [s for s in report["slots"] if s["own"]]}


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _page_file(name: str) -> Response:
    data = importlib.resources.files("specdec_cli.serve").joinpath("static", name).read_bytes()
    return Response(data, media_type=PAGE_FILES[name], headers={"Cache-Control": "no-cache"})


class _Guard:
    """guard.py's Host and Origin rules on every request, before any route; preflights answered,
    and CORS headers on the responses to the origins --cors-origin allows."""

    def __init__(self, app, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        try:
            self.access.check_host(headers.get("host"))
            cross = self.access.check_origin(origin, headers.get("host"))
        except Refused as exc:
            return await _error_response(ApiError(exc.status, exc.message, code=exc.code))(scope, receive, send)
        if cross and scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            requested = headers.get("access-control-request-headers")
            return await Response(status_code=204, headers=self.access.preflight_headers(origin, requested))(scope, receive, send)
        if not cross:
            return await self.app(scope, receive, send)
        extra = [(k.lower().encode(), v.encode()) for k, v in self.access.cors_headers(origin).items()]

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, sending)


class _AccessLog:
    """One stderr line per request, written when its response has ended (a stream's last chunk
    included), and the request counted in the metrics by endpoint and status."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 0

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            stats = scope.get("state", {}).get("stats")
            figures = ""
            if stats is not None:
                figures = f", {stats.new_tokens} tokens, " + (f"acceptance {stats.acceptance_rate:.2f}" if stats.drafted else "nothing drafted")
            ms = (time.perf_counter() - start) * 1e3
            self.metrics.answered(scope["path"] if scope["path"] in ENDPOINTS else "other", status or 499)
            access.info("%s %s %s%s, %.0f ms", scope["method"], scope["path"], status or "-", figures, ms)
