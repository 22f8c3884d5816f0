"""The OpenAI wire format's responses, built from the engine's events. Pure: no I/O, no model.

One `Answer` per request turns what the worker hands back into JSON objects:

    answer = Answer(kind="chat", model="SmolLM2", settings=settings, cached_tokens=0)
    answer.chunk_for(Token(42, "Hi", Source.DRAFT, 1))
    -> {"id": "chatcmpl-..", "object": "chat.completion.chunk", "created": 1764600000,
        "model": "SmolLM2", "choices": [{"index": 0, "delta": {"content": "Hi"},
        "logprobs": None, "finish_reason": None}]}
    answer.final(outcome)   -> the whole "chat.completion" object (stream false)

`usage` is OpenAI's (prompt_tokens, completion_tokens, total_tokens, and
prompt_tokens_details.cached_tokens: the prompt tokens the target's KV cache already held).
`timings` carries the speculative figures under llama-server's names (draft_n,
draft_n_accepted, prompt_n, predicted_n, ...; prompt_n counts only what was evaluated, as
there) plus specdec's: target_passes, tokens_per_pass, acceptance_by_position, seed.

With `specdec_events` (the page asks for it) token chunks also carry
`"specdec": {"source": "draft", "position": 1}`, and two chunk kinds with no choices come in
between: `{"specdec": {"rejected": {"text", "position"}}}` and `{"specdec": {"round":
{"drafted", "accepted", "k", "source", "seconds"}}}`. They come in the engine's order: a
round's rejected draft first, then the tokens it emitted (the drafts kept, the correction),
then the round; a client that shows the rejected draft in place holds it until its
correction arrives (the page does). Other clients never see them.

Tool calls (a chat request with tools: grammar/tools.py's parser reads the answer): streamed as
OpenAI streams them, `delta.tool_calls` with the call's `index`, then its `id`, type and
function name in one chunk, then the arguments in pieces (`function.arguments`); text before a
call is `delta.content`. A whole answer has `message.tool_calls` (arguments as JSON text) and
content null when there is none. An answer that made calls and ended by itself finishes with
"tool_calls"; one cut by max_tokens with "length" (its JSON is incomplete, as is any
constrained answer's that ends so).

Left out: reading requests (types.py), sending anything (completions.py).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..decoding.consume import Outcome
from ..decoding.stats import RunStats
from ..events import Rejected, Round, Token
from ..grammar.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolParser
from .types import Settings

FINISH_REASONS = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context_full": "length", "time_limit": "length"}


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object. Example: ("top_p must be in (0, 1], got 1.5", "invalid_request_error", "top_p")."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _logprob(value: float) -> float:
    """JSON has no -inf: a token of probability 0 (possible only among alternatives) gets -9999, as OpenAI does."""
    return value if math.isfinite(value) else -9999.0


def logprob_entry(token: Token) -> dict | None:
    """OpenAI's per-token logprob object (chat's `logprobs.content[i]`), or None without logprobs."""
    lp = token.logprobs
    if lp is None:
        return None
    return {
        "token": lp.bytes.decode("utf-8", "replace"),
        "logprob": _logprob(lp.logprob),
        "bytes": list(lp.bytes),
        "top_logprobs": [{"token": b.decode("utf-8", "replace"), "logprob": _logprob(v), "bytes": list(b)} for b, v in lp.top],
    }


def completion_logprobs(entries: list[dict], at: int = 0) -> dict:
    """The legacy endpoint's shape: parallel lists (tokens, token_logprobs, top_logprobs, text_offset),
    each token's offset counted in characters from `at` (where a streamed chunk's first token starts).
    Example: tokens "Hi", " there" -> text_offset [0, 2]; the second alone, at 2 -> [2]."""
    offsets = []
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": offsets,
    }


def usage(stats: RunStats, cached_tokens: int) -> dict:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.new_tokens,
        "total_tokens": stats.prompt_tokens + stats.new_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def timings(stats: RunStats, cached_tokens: int, seed: int) -> dict:
    evaluated = max(stats.prompt_tokens - cached_tokens, 0)
    return {
        "cache_n": cached_tokens,
        "prompt_n": evaluated,
        "prompt_ms": stats.prefill_seconds * 1e3,
        "predicted_n": stats.new_tokens,
        "predicted_ms": stats.generation_seconds * 1e3,
        "predicted_per_second": stats.tokens_per_second,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
        "target_passes": stats.target_passes,
        "tokens_per_pass": stats.tokens_per_pass,
        "acceptance_by_position": stats.acceptance_by_position,
        "drafted_by_position": stats.drafted_by_position,  # the counts behind it: a 0/0 position reads 0.0 above
        "accepted_by_position": stats.accepted_by_position,
        "forced_n": stats.forced,  # tokens the constraint forced: free drafts (grammar/guide.py)
        "grammar_ms": stats.grammar_seconds * 1e3,  # computing the constraint's masks
        "seed": seed,
    }


@dataclass
class Answer:
    """The response to one request, chunk by chunk or whole."""

    kind: str  # "chat" or "completion"
    model: str
    settings: Settings
    cached_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))
    entries: list[dict] = field(default_factory=list)  # logprob entries so far
    offset: int = 0  # characters of the logprob entries so far (the legacy endpoint's next text_offset)
    parser: ToolParser | None = None  # a chat with tools: grammar/tools.py's parser of this answer
    spell: Callable[[int], str] | None = None  # the text of a special token (a family's call opener), which Token.text leaves out

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]

    @property
    def _object(self) -> str:
        return "chat.completion" if self.kind == "chat" else "text_completion"

    def _envelope(self, choices: list, **extra) -> dict:
        obj = self._object + (".chunk" if self.kind == "chat" else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices, **extra}

    def _choice(self, text: str | None, finish: str | None, logprobs) -> dict:
        if self.kind == "chat":
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}

    # -- streaming --------------------------------------------------------------------

    def opening(self) -> dict | None:
        """Chat's first chunk names the role; the legacy endpoint has none."""
        if self.kind != "chat":
            return None
        return self._envelope([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])

    def chunk_for(self, event) -> dict | None:
        """The chunk an engine event becomes, or None (Prefill, or a page-only event for another client)."""
        if isinstance(event, Token):
            entry = logprob_entry(event)
            logprobs = None
            if entry is not None:
                self.entries.append(entry)
                logprobs = {"content": [entry]} if self.kind == "chat" else completion_logprobs([entry], self.offset)
                self.offset += len(entry["token"])
            if self.parser is not None:
                delta = self._delta(self.parser.feed(self._parsed(event)))
                if not delta and logprobs is None and not self.settings.events:
                    return None  # the call format's own text (braces, keys): nothing for the client yet
                chunk = self._envelope([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}])
            else:
                chunk = self._envelope([self._choice(event.text, None, logprobs)])
            if self.settings.events:
                chunk["specdec"] = {"source": event.source.value, "position": event.position}
            return chunk
        if not self.settings.events:
            return None
        if isinstance(event, Rejected):
            return self._envelope([], specdec={"rejected": {"text": event.text, "position": event.position}})
        if isinstance(event, Round):
            figures = {"drafted": event.drafted, "accepted": event.accepted, "k": event.k, "source": event.drafter, "verify": event.rule, "seconds": event.seconds, "sequences": event.sequences}
            return self._envelope([], specdec={"round": figures})
        return None

    def _parsed(self, token: Token) -> str:
        """What the tool-call parser reads of a token: its text, or a special token's own (an opener)."""
        return token.text or (self.spell(token.id) if self.spell is not None else "")

    def _delta(self, deltas: list) -> dict:
        """One chunk's `delta` from the parser's deltas: content joined, tool call pieces by index."""
        out: dict = {}
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        if content:
            out["content"] = content
        calls = []
        for d in deltas:
            if isinstance(d, CallStart):
                calls.append({"index": d.index, "id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}})
            elif isinstance(d, ArgumentsDelta):
                if calls and calls[-1]["index"] == d.index:
                    calls[-1]["function"]["arguments"] += d.text
                else:
                    calls.append({"index": d.index, "function": {"arguments": d.text}})
        if calls:
            out["tool_calls"] = calls
        return out

    def _reason(self, outcome: Outcome, calls: int) -> str:
        reason = FINISH_REASONS.get(outcome.stats.finish_reason, "stop")
        return "tool_calls" if calls and reason == "stop" else reason

    def closing(self, outcome: Outcome) -> list[dict]:
        """The finish chunk (after what the tool-call parser held back), then (stream_options.include_usage)
        the usage chunk with no choices."""
        out = []
        if self.parser is not None:
            rest = self._delta(self.parser.end())
            if rest:
                out.append(self._envelope([{"index": 0, "delta": rest, "logprobs": None, "finish_reason": None}]))
        reason = self._reason(outcome, len(self.parser.finish().calls) if self.parser is not None else 0)
        out.append(self._envelope([self._choice(None if self.kind == "chat" else "", reason, None)]))
        if self.settings.include_usage or self.settings.events:
            stats = outcome.stats
            out.append(self._envelope([], usage=usage(stats, self.cached_tokens), timings=timings(stats, self.cached_tokens, self.settings.config.seed)))
        return out

    # -- whole ------------------------------------------------------------------------

    def final(self, outcome: Outcome) -> dict:
        stats = outcome.stats
        reason = FINISH_REASONS.get(stats.finish_reason, "stop")
        logprobs = None
        if self.settings.top_logprobs is not None:
            logprobs = {"content": self.entries} if self.kind == "chat" else completion_logprobs(self.entries)
        if self.kind == "chat" and self.parser is not None:
            reply = self.parser.finish()
            message = {"role": "assistant", "content": reply.content}
            if reply.calls:
                message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": self._reason(outcome, len(reply.calls))}
        elif self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": outcome.text}, "logprobs": logprobs, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": outcome.text, "logprobs": logprobs, "finish_reason": reason}
        return {
            "id": self.id, "object": self._object, "created": self.created, "model": self.model, "choices": [choice],
            "usage": usage(stats, self.cached_tokens), "timings": timings(stats, self.cached_tokens, self.settings.config.seed),
        }  # fmt: skip

    def collect(self, event) -> None:
        """Non-streaming: keep what `final` needs from a Token (its logprobs; the tool-call parser reads it)."""
        if isinstance(event, Token):
            entry = logprob_entry(event)
            if entry is not None:
                self.entries.append(entry)
            if self.parser is not None:
                self.parser.feed(self._parsed(event))
