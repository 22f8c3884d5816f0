"""`specdec serve`'s app: OpenAI's endpoints and the page, each route wired to the part that answers it.

    POST /v1/chat/completions   chat turns through the target's template (stream or not)
    POST /v1/completions        a raw prompt, as `specdec run --raw`
    GET  /v1/models             the one model, by its alias
    GET  /health                503 while the models load, then 200 (as llama-server); 503 with
                                the reason if they failed to load or cannot serve any more
    GET  /metrics               Prometheus' text format (metrics.py), behind the admin key
    GET  /slots                 the page's slots panel: a tenant's own slots; every slot, the
                                target's passes and the drafting rates with the admin key
    GET  /                      the page (static/index.html, page.js, page.css)

Every request first passes the guard (middleware.py: guard.py's Host and Origin rules, CORS for
the origins --cors-origin allows); /v1 and /slots then need a key when there are keys, and the
key is the request's tenant; what sums up every tenant's traffic needs the admin key (guard.py).
With a tenant's key /slots keeps that tenant's slots alone, e.g. {"slots": [{"slot": 2, "busy":
true, "cached": 40, "rounds": 9, "tokens": 21}]}. A generation goes: body (body.py) -> typed
model (types.py) -> Settings (options.py's checks) -> a Job for the worker (worker.py) -> what it
hands back, as JSON or server-sent events (completions.py, wire.py). Handlers never touch a model.
Every error leaves in OpenAI's shape from one handler (errors.py), and stderr gets one line per
request (middleware.py).

    app = create_app(worker, Defaults(max_tokens=256), alias="SmolLM2", access=Access.for_bind("127.0.0.1", 8080))
    GET /v1/models -> {"object": "list", "data": [{"id": "SmolLM2", "object": "model", ...}]}

Left out: uvicorn's side (server.py), loading and generating (worker.py), the command and its
options (cli/serve.py).
"""

from __future__ import annotations

import asyncio
import importlib.resources
import time

from fastapi import FastAPI, Request
from fastapi.responses import Response

from .body import BODY_SECONDS, MAX_BODY_BYTES, read_json
from .completions import Completions
from .errors import RETRY_AFTER_SECONDS, ApiError, error_response, from_refused, install_handlers
from .guard import Access, Refused
from .metrics import CONTENT_TYPE as METRICS_TYPE
from .metrics import Metrics
from .middleware import AccessLog, Guard
from .types import Defaults
from .worker import Worker

PAGE_FILES = {"index.html": "text/html; charset=utf-8", "page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}


def create_app(
    worker: Worker, defaults: Defaults, alias: str, access: Access = Access(), max_body: int = MAX_BODY_BYTES, body_seconds: float = BODY_SECONDS
) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, title="specdec")
    metrics = Metrics(waiting=lambda: worker.waiting, running=lambda: worker.running, decoded=lambda: worker.pair.target.decoded if worker.pair else 0)
    completions = Completions(worker, defaults, alias, metrics)
    app.add_middleware(Guard, access=access)
    app.add_middleware(AccessLog, metrics=metrics)
    install_handlers(app)

    def tenant(request: Request) -> str:
        try:
            return access.tenant(request.headers.get("authorization"))
        except Refused as exc:
            raise from_refused(exc) from None

    def admin(request: Request) -> None:
        try:
            access.check_admin(request.headers.get("authorization"), request.url.path)
        except Refused as exc:
            raise from_refused(exc) from None

    def ready_or_503() -> None:
        if worker.gone is not None:
            raise ApiError(503, worker.gone, "unavailable_error")
        if not worker.ready.is_set():
            raise ApiError(503, "the models are still loading", "unavailable_error", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.get("/health")
    async def health():
        if worker.gone is not None:
            return error_response(ApiError(503, worker.gone, "unavailable_error"))
        if not worker.ready.is_set():
            return error_response(ApiError(503, "loading the models", "unavailable_error"))
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
        value = await read_json(request, max_body, body_seconds)
        job, settings, parser = await asyncio.to_thread(completions.chat_job, value, who)  # a constraint compiles in llguidance: off the event loop
        return await completions.answer(request, job, "chat", settings, parser)

    @app.post("/v1/completions")
    async def completion(request: Request):
        who = tenant(request)
        ready_or_503()
        value = await read_json(request, max_body, body_seconds)
        job, settings = await asyncio.to_thread(completions.completion_job, value, who)
        return await completions.answer(request, job, "completion", settings)

    @app.get("/")
    async def page():
        return _page_file("index.html")

    @app.get("/static/{name}")
    async def static(name: str):
        if name not in PAGE_FILES:
            raise ApiError(404, f"no file {name!r}", code="not_found")
        return _page_file(name)

    started_at = time.time()
    return app


def _own_slots(report: dict) -> dict:
    """slot_report for one tenant, less what the others' traffic makes up: only its own slots, and
    none of the server's passes, busy seconds or drafting rates. Whatever slot_report adds later
    stays out too, until it is named here."""
    return {"slots": [s for s in report["slots"] if s["own"]]}


def _page_file(name: str) -> Response:
    data = importlib.resources.files("specdec_cli.serve").joinpath("static", name).read_bytes()
    return Response(data, media_type=PAGE_FILES[name], headers={"Cache-Control": "no-cache"})
