"""One completion request, from its JSON object to its answer: validated, queued, answered whole or streamed.

`Completions` serves both endpoints that generate. A request's object is read into its typed
model (types.py) and into Settings by options.py's checks (`parse`); a chat request with tools
is planned against the target's chat template (grammar/tools.py: the family, the prompt's
tools, the grammar, the parser of the answer), and its grammar compiled over the target's
vocabulary before the job is queued, so a bad schema, grammar or tool list is a 400 naming the
field (`chat_job`; run it in a thread: llguidance compiles on the CPU). `answer` queues the Job
with the worker and turns what the worker hands back into one JSON answer, or server-sent
events with `"stream": true` (wire.py builds each object):

    job, settings, parser = completions.chat_job({"messages": [{"role": "user", "content": "hi"}], "stream": True}, tenant)
    await completions.answer(request, job, "chat", settings, parser)
    -> 200, text/event-stream:
       data: {"object": "chat.completion.chunk", ..., "choices": [{"delta": {"role": "assistant", "content": ""}, ...}]}
       data: {"object": "chat.completion.chunk", ..., "choices": [{"delta": {"content": "Hi"}, ...}]}
       ...
       data: [DONE]

An error before the first token is the answer (errors.py's shape); one after a stream's 200 is an
error event, as OpenAI sends one. A client that goes away cancels its job within a quarter of a
second (499 in the log line), and a stream that ends for any reason cancels it too. Each answer
feeds the latency histograms (time to the first token, to the last) in metrics.py.

Left out: the body's bytes (body.py), keys and routes (app.py), generating (worker.py), the JSON
shapes (wire.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import AsyncIterator

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError

from ..errors import GrammarError, SpecdecError
from ..events import Token
from ..grammar import compile as grammars
from ..grammar import tools as tool_calls
from ..options import BadSetting
from .errors import ApiError, from_specdec
from .metrics import Metrics
from .types import ChatRequest, CompletionRequest, Defaults, Settings
from .wire import Answer, error_body
from .jobs import Done, Failed, Job, Started
from .worker import Worker

CLIENT_POLL_SECONDS = 0.25  # how often a request waiting on the worker asks whether its client is still there


class _ClientGone(Exception):
    pass


class Timing:
    """When a request arrived and when its first token came (for the latency histograms)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.arrived = time.perf_counter()
        self.first: float | None = None

    def saw(self, item) -> None:
        if self.first is None and isinstance(item, Token):
            self.first = time.perf_counter() - self.arrived

    def done(self, request: Request, item: Done, cached_tokens: int) -> None:
        request.state.stats = item.outcome.stats  # for the log line (middleware.AccessLog)
        self.metrics.finished(item.outcome.stats, cached_tokens, self.first, time.perf_counter() - self.arrived)


class Completions:
    """/v1/chat/completions and /v1/completions over one worker, answering to the model's `alias`."""

    def __init__(self, worker: Worker, defaults: Defaults, alias: str, metrics: Metrics) -> None:
        self.worker, self.defaults, self.alias, self.metrics = worker, defaults, alias, metrics

    # -- a request into a Job ---------------------------------------------------------------

    def parse(self, model_type, value: dict):
        """The body as `model_type` and its Settings, or ApiError naming the first field at fault."""
        try:
            request = model_type.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first["loc"]) or None
            raise ApiError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None
        if request.model is not None and request.model != self.alias:
            raise ApiError(404, f"the model {request.model!r} does not exist; this server answers to {self.alias!r}", param="model", code="model_not_found")
        try:
            return request, Settings.of(request, self.defaults, self.worker.grammar_tokenizer())
        except SpecdecError as exc:
            raise from_specdec(exc) from None

    def chat_job(self, value: dict, who: str) -> tuple[Job, Settings, object]:
        """A chat request as the worker's Job, its settings and (with tools) the parser of its answer."""
        body, settings = self.parse(ChatRequest, value)
        worker = self.worker
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
            raise from_specdec(BadSetting("tools", str(exc))) from None
        except SpecdecError as exc:
            raise from_specdec(exc) from None
        return Job(settings=settings, messages=messages, tools=tools, tenant=who), settings, parser

    def completion_job(self, value: dict, who: str) -> tuple[Job, Settings]:
        """A raw-prompt request (as `specdec run --raw`) as the worker's Job and its settings."""
        body, settings = self.parse(CompletionRequest, value)
        return Job(settings=settings, prompt=body.text(), tenant=who), settings

    # -- the Job's items into an answer --------------------------------------------------------

    async def answer(self, request: Request, job: Job, kind: str, settings: Settings, parser=None):
        """Queue `job`; its answer as one JSON object, or a stream of server-sent events."""
        timing = Timing(self.metrics)
        try:
            self.worker.submit(job, asyncio.get_running_loop())
        except SpecdecError as exc:
            raise from_specdec(exc) from None
        try:
            first = await _next_item(request, job)
        except _ClientGone:
            return Response(status_code=499)
        if isinstance(first, Failed):
            raise from_specdec(first.error)
        assert isinstance(first, Started), first
        reply = Answer(kind=kind, model=self.alias, settings=settings, cached_tokens=first.cached_tokens, parser=parser, spell=self.worker.special_text)
        if settings.stream:
            return StreamingResponse(_stream(request, job, reply, timing), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            while True:
                item = await _next_item(request, job)
                if isinstance(item, Failed):
                    raise from_specdec(item.error)
                timing.saw(item)
                if isinstance(item, Done):
                    timing.done(request, item, reply.cached_tokens)
                    return reply.final(item.outcome)
                reply.collect(item)
        except _ClientGone:
            return Response(status_code=499)


async def _stream(request: Request, job: Job, reply: Answer, timing: Timing) -> AsyncIterator[str]:
    try:
        opening = reply.opening()
        if opening is not None:
            yield _sse(opening)
        while True:
            item = await _next_item(request, job)
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


async def _next_item(request: Request, job: Job):
    """The worker's next item for this job; a client that went away cancels the job."""
    if not job.items.empty():  # a round's items come together: only the first waits (wait_for's task and timer cost more than the item)
        return job.items.get_nowait()
    while True:
        try:
            return await asyncio.wait_for(job.items.get(), timeout=CLIENT_POLL_SECONDS)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                raise _ClientGone from None


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
