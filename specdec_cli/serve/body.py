"""A POST request's body, read within limits into a JSON object, or a 4xx saying what is wrong with it.

`read_json` takes the body as application/json only (else 415), at most `max_body` bytes (else
413, from Content-Length before reading when it says so), within `body_seconds` once the
headers are in (else 408); `parse_body` then wants UTF-8 holding one JSON object of at most
`MAX_JSON_DEPTH` levels whose integers fit 64 bits, with no NaN or Infinity and no lone
surrogate (else 400). Nothing a client sends gets past here as a 500.

    parse_body(b'{"prompt": "hi", "max_tokens": 8}')  -> {"prompt": "hi", "max_tokens": 8}
    parse_body(b'[1, 2]')                             -> ApiError(400, "the body must be a JSON object, not list")
    parse_body(b'{"n": 1e999}')                       -> ApiError(400, "a number in the body is out of range: 1e999")

Left out: what the object must hold (types.py, read by completions.py), the error shape (errors.py).
"""

from __future__ import annotations

import asyncio
import json
import math

from fastapi import Request

from .errors import ApiError

MAX_BODY_BYTES = 1 << 20  # 1 MiB: far above any prompt a 2048..131072-token context takes as text per request
BODY_SECONDS = 30.0  # to read a request's body, once its headers are in
MAX_JSON_DEPTH = 32  # levels of nesting in a body: a chat request needs 4
MAX_INT = 2**63 - 1  # the largest integer a body may hold (in magnitude)


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


async def read_json(request: Request, max_body: int = MAX_BODY_BYTES, body_seconds: float = BODY_SECONDS) -> dict:
    """The request's body as a JSON object (`parse_body`), once its type, size and arrival time pass."""
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
