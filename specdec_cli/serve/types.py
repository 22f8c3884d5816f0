"""The OpenAI wire format's requests, as typed models: what a body may hold, and its types.

Pydantic checks the shape and the types strictly ("0.5" is not a number, 1 is not a bool);
what a value means (ranges, defaults, messages) is options.py's, as for the command line:
`Settings.of(request, defaults)` hands each value to the same check `specdec run` uses, and
a BadSetting names the field (`param`) in the error. Example:

    ChatRequest.model_validate({"messages": [{"role": "user", "content": "Hi"}], "top_p": 1.5})
    -> Settings.of(...) raises BadSetting: param "top_p", "top_p must be in (0, 1], got 1.5"

Fields OpenAI clients send that change nothing here (user, metadata, ...) are ignored;
ones that would change the output and are not supported (n > 1, penalties, logit_bias,
tools, echo, suffix) are refused with a 400 naming them, never silently dropped.

Left out: answering (app.py), generating (worker.py), the responses' shape (wire.py).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..decoding.engine import GenerationConfig
from ..events import DraftTokens
from ..maths.sampling import SamplingParams
from ..options import DEFAULT_VERIFY, MAX_TOP_LOGPROBS, BadSetting, check_sampling_options, check_seed, check_stops, parse_draft_length, parse_drafter, parse_verify

_STRICT = ConfigDict(strict=True, extra="ignore")


class TextPart(BaseModel):
    model_config = _STRICT
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart], None] = None

    def text(self) -> str:
        """The content as one string. Example: [{"type": "text", "text": "a"}, {.. "b"}] -> "ab"."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


class _Common(BaseModel):
    """What both endpoints take: sampling, the token budget, streaming, and specdec's own fields."""

    model_config = _STRICT
    model: Optional[str] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None  # llama.cpp's
    min_p: Optional[float] = None  # llama.cpp's
    seed: Optional[int] = None
    stop: Union[str, list[str], None] = None
    n: Optional[int] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    logit_bias: Optional[dict] = None
    draft_tokens: Union[Literal["auto"], int, None] = None  # specdec: "auto" or a fixed k
    drafter: Optional[str] = None  # specdec: options.DRAFTERS
    verify: Optional[str] = None  # specdec: token, block or auto (options.VERIFY_RULES)
    specdec_events: bool = False  # specdec: provenance, rejected drafts and rounds in the stream (the page)

    def unsupported(self) -> list[str]:
        """Fields set to something this server would have to ignore, which would change the output."""
        out = []
        if self.n not in (None, 1):
            out.append("n")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                out.append(name)
        if self.logit_bias:
            out.append("logit_bias")
        return out


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    tools: Optional[list] = None

    def unsupported(self) -> list[str]:
        return super().unsupported() + (["tools"] if self.tools else [])

    def turns(self) -> list[tuple[str, str]]:
        """(role, text) for the chat template; OpenAI's "developer" is the system role."""
        return [("system" if m.role == "developer" else m.role, m.text()) for m in self.messages]


class CompletionRequest(_Common):
    prompt: Union[str, list[str]]
    logprobs: Optional[int] = None  # the legacy endpoint's: how many alternatives per token
    echo: bool = False
    suffix: Optional[str] = None

    def unsupported(self) -> list[str]:
        out = super().unsupported()
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            out.append("prompt")  # a batch of prompts is n > 1 in another form
        return out + [name for name in ("echo", "suffix") if getattr(self, name)]

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


@dataclass(frozen=True)
class Defaults:
    """The server's settings for what a request leaves out: `specdec serve`'s options, checked at start."""

    max_tokens: int = 256
    sampling: SamplingParams = SamplingParams()
    draft_tokens: DraftTokens = "auto"
    drafter: str = "model"
    p_min: float | None = None
    verify: str = DEFAULT_VERIFY


@dataclass(frozen=True)
class Settings:
    """One request's settings, each checked by options.py as `specdec run` checks its flags.

    `max_tokens` is None when the request gives none: the worker then fills the context's room
    up to the server's default.
    """

    config: GenerationConfig
    max_tokens: int | None
    draft_tokens: DraftTokens
    drafter: str
    p_min: float | None  # the server's --p-min (not a request field)
    top_logprobs: int | None  # None: no logprobs; 0..MAX_TOP_LOGPROBS alternatives per token
    stream: bool
    include_usage: bool
    events: bool

    @classmethod
    def of(cls, request: _Common, defaults: Defaults) -> "Settings":
        unsupported = request.unsupported()
        if unsupported:
            name = unsupported[0]
            raise BadSetting(name, "is not supported by specdec serve (one answer per request, no penalties, tools or echo)")
        max_tokens = request.max_tokens
        if isinstance(request, ChatRequest) and request.max_completion_tokens is not None:
            max_tokens = request.max_completion_tokens
        d = defaults.sampling
        sampling = SamplingParams(
            temperature=_given(request.temperature, d.temperature),
            top_k=_given(request.top_k, d.top_k),
            top_p=_given(request.top_p, d.top_p),
            min_p=_given(request.min_p, d.min_p),
        )
        check_sampling_options(sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p, _given(max_tokens, defaults.max_tokens))
        check_seed(request.seed)
        stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
        check_stops(stops)
        draft_tokens = defaults.draft_tokens if request.draft_tokens is None else parse_draft_length(str(request.draft_tokens))
        drafter = defaults.drafter if request.drafter is None else parse_drafter(request.drafter)
        verify = defaults.verify if request.verify is None else parse_verify(request.verify)
        seed = secrets.randbits(32) if request.seed is None else request.seed
        top_logprobs = _top_logprobs(request)
        config = GenerationConfig(
            max_tokens=_given(max_tokens, defaults.max_tokens),
            sampling=sampling,
            seed=seed,
            stop=tuple(stops),
            logprobs=top_logprobs,
            verify=verify,
        )
        return cls(
            config=config,
            max_tokens=max_tokens,
            draft_tokens=draft_tokens,
            drafter=drafter,
            p_min=defaults.p_min,
            top_logprobs=top_logprobs,
            stream=request.stream,
            include_usage=bool(request.stream_options and request.stream_options.include_usage),
            events=request.specdec_events,
        )


def _given(value, default):
    return default if value is None else value


def _top_logprobs(request: _Common) -> int | None:
    """How many alternatives per token, or None for no logprobs. Chat: logprobs true and
    top_logprobs 0..20; completions: logprobs 0..20 (OpenAI's legacy endpoint allows 5)."""
    if isinstance(request, ChatRequest):
        if request.top_logprobs is not None and not request.logprobs:
            raise BadSetting("top_logprobs", "needs logprobs: true")
        n = (request.top_logprobs or 0) if request.logprobs else None
        name = "top_logprobs"
    else:
        n, name = request.logprobs, "logprobs"
    if n is not None and not 0 <= n <= MAX_TOP_LOGPROBS:
        raise BadSetting(name, f"must be between 0 and {MAX_TOP_LOGPROBS}, got {n}")
    return n

