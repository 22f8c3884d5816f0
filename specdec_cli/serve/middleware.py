"""What every request passes through before and after its route: the guard, and the log line with its count.

`Guard` applies guard.py's Host and Origin rules to every request before any route (a refusal is
errors.py's shape), answers CORS preflights, and adds the CORS headers to the responses for the
origins --cors-origin allows. `AccessLog` writes one stderr line per request once its response
has ended (a stream's last chunk included) and counts the request in the metrics by endpoint and
status; a request whose client left before any response counts as 499:

    specdec: POST /v1/chat/completions 200, 64 tokens, acceptance 0.81, 1234 ms
    specdec: GET /v1/nothing 404, 0 ms

They are plain ASGI middleware (app.py adds them), so they see a stream's end, which an HTTP
middleware that returns the response object would not.

Left out: the rules themselves (guard.py), the keys each route asks for (app.py), the metrics'
format (metrics.py).
"""

from __future__ import annotations

import logging
import time

from fastapi.responses import Response

from .errors import error_response, from_refused
from .guard import Access, Refused
from .metrics import Metrics

access_log = logging.getLogger("specdec.access")  # cli/serve.py turns it on (info level)

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/slots", "/")  # metrics' labels; others are "other"


class Guard:
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
            return await error_response(from_refused(exc))(scope, receive, send)
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


class AccessLog:
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
            stats = scope.get("state", {}).get("stats")  # completions.Timing leaves a generation's figures here
            figures = ""
            if stats is not None:
                figures = f", {stats.new_tokens} tokens, " + (f"acceptance {stats.acceptance_rate:.2f}" if stats.drafted else "nothing drafted")
            ms = (time.perf_counter() - start) * 1e3
            self.metrics.answered(scope["path"] if scope["path"] in ENDPOINTS else "other", status or 499)
            access_log.info("%s %s %s%s, %.0f ms", scope["method"], scope["path"], status or "-", figures, ms)
