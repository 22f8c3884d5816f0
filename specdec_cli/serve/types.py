"""The OpenAI wire format's requests, as typed models: what a body may hold, and its types.

Pydantic checks the shape and the types strictly ("0.5" is not a number, 1 is not a bool);
what a value means (ranges, defaults, messages) is options.py's, as for the command line:
`Settings.of(request, defaults)` hands each value to the same check `specdec run` uses, and
a BadSetting names the field (`param`) in the error. Example:

    ChatRequest.model_validate({"messages": [{"role": "user", "content": "Hi"}], "top_p": 1.5})
    -> Settings.of(...) raises BadSetting: param "top_p", "top_p must be in (0, 1], got 1.5"

Constraints: OpenAI's `response_format` (json_schema, strict or not, and json_object) and
llama-server's `json_schema` and `grammar` (GBNF) become the config's Grammar here (options.
constraint: the same check as run --json-schema); `tools` with `tool_choice` and
`parallel_tool_calls` are checked here (grammar/tools.py) and planned against the model's chat
template by the app, which knows it. At most one constraint per request.

Fields OpenAI clients send that change nothing here are accepted and ignored (IGNORED: user,
metadata, store, ...); ones that would change the output and are not supported (REFUSED: n > 1,
best_of > 1, penalties, logit_bias, functions, echo, suffix, audio ...) are refused with a 400
naming them, never silently dropped. Unknown fields are ignored, as OpenAI's clients add new
ones: docs/structured.md lists both sets.

Left out: answering (completions.py), generating (worker.py), the responses' shape (wire.py).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..decoding.engine import GenerationConfig
from ..errors import GrammarError
from ..events import DraftTokens
from ..grammar.compile import Grammar
from ..grammar.tools import Tool, ToolChoice, tools_of
from ..maths.sampling import SamplingParams
from ..options import DEFAULT_VERIFY, MAX_TOP_LOGPROBS, BadSetting, check_sampling_options, check_seed, check_stops, constraint, parse_draft_length, parse_drafter, parse_verify

_STRICT = ConfigDict(strict=True, extra="ignore", populate_by_name=True)
_COMMON = ConfigDict(strict=True, extra="allow", populate_by_name=True)  # the top level keeps unknown fields, to refuse those in REFUSED

# Fields that would change the output and are not supported: refused unless set to one of the
# values listed (those that change nothing). n, best_of, the penalties and logit_bias are fields
# of _Common, checked in `unsupported`.
REFUSED = {
    "functions": (None, []), "function_call": (None, "none", "auto"),  # OpenAI's old form of tools: send tools
    "audio": (None,), "modalities": (None, ["text"]), "web_search_options": (None,),
    "logit_bias_type": (None,), "typical_p": (None, 1, 1.0), "mirostat": (None, 0), "dry_multiplier": (None, 0, 0.0),
    "xtc_probability": (None, 0, 0.0), "ignore_eos": (None, False), "dynatemp_range": (None, 0, 0.0),
    "top_n_sigma": (None, -1, -1.0), "samplers": (None,), "n_probs": (None, 0), "repeat_last_n": (None, 64),
}  # fmt: skip
# Accepted and ignored, whatever their value: they change nothing in the output here (as does
# parallel_tool_calls without tools).
IGNORED = ("user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier", "reasoning_effort", "prediction",
           "verbosity", "cache_prompt", "id_slot", "timings_per_token", "return_tokens")  # fmt: skip


class ContentPart(BaseModel):
    """One part of a message's content: text (or an assistant's refusal) is taken; images, audio and
    files are refused by name (`Message.text`)."""

    model_config = _STRICT
    type: str
    text: Optional[str] = None
    refusal: Optional[str] = None


class FunctionCall(BaseModel):
    model_config = _STRICT
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    model_config = _STRICT
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None  # assistant
    tool_call_id: Optional[str] = None  # tool

    def text(self, where: str = "messages") -> str:
        """The content as one string. Example: [{"type": "text", "text": "a"}, {.. "b"}] -> "ab"."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        out = []
        for j, part in enumerate(self.content):
            if part.type == "text" and part.text is not None:
                out.append(part.text)
            elif part.type == "refusal" and part.refusal is not None and self.role == "assistant":
                out.append(part.refusal)
            else:
                raise BadSetting(f"{where}.content.{j}.type", f"{part.type!r} is not supported: this server reads text parts only")
        return "".join(out)


class JsonSchemaFormat(BaseModel):
    model_config = _STRICT
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[Union[dict, bool]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    model_config = _STRICT
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None
    schema_: Optional[dict] = Field(default=None, alias="schema")  # llama-server's json_object with a schema


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


class _Common(BaseModel):
    """What both endpoints take: sampling, the token budget, streaming, constraints, and specdec's own fields."""

    model_config = _COMMON
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
    response_format: Optional[ResponseFormat] = None
    json_schema: Optional[Union[dict, bool]] = None  # llama-server's
    grammar: Optional[str] = None  # llama-server's (GBNF)
    best_of: Optional[int] = None
    repeat_penalty: Optional[float] = None  # llama-server's
    draft_tokens: Union[Literal["auto"], int, None] = None  # specdec: "auto" or a fixed k
    drafter: Optional[str] = None  # specdec: options.DRAFTERS
    verify: Optional[str] = None  # specdec: token, block or auto (options.VERIFY_RULES)
    specdec_events: bool = False  # specdec: provenance, rejected drafts and rounds in the stream (the page)

    def unsupported(self) -> list[str]:
        """Fields set to something this server would have to ignore, which would change the output."""
        out = []
        for name in ("n", "best_of"):
            if getattr(self, name) not in (None, 1):
                out.append(name)
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                out.append(name)
        if self.repeat_penalty not in (None, 1, 1.0):
            out.append("repeat_penalty")
        if self.logit_bias:
            out.append("logit_bias")
        extra = self.model_extra or {}
        return out + [name for name in REFUSED if name in extra and extra[name] not in REFUSED[name]]

    def constraints(self) -> list[str]:
        """The constraint fields the request sets (response_format of type text is none)."""
        given = [name for name in ("response_format", "json_schema", "grammar") if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type == "text":
            given.remove("response_format")
        return given

    def grammar_of(self, tokenizer=None) -> Grammar | None:
        """The request's constraint compiled (at most one of response_format, json_schema, grammar),
        checked over the target's vocabulary where `tokenizer` is given; None for free text."""
        given, fmt = self.constraints(), self.response_format
        if len(given) > 1:
            raise BadSetting(given[1], f"cannot be combined with {given[0]}: give one constraint per request")
        if not given:
            return None
        if given[0] == "grammar":
            return constraint("grammar", self.grammar, tokenizer=tokenizer)
        if given[0] == "json_schema":
            return constraint("json_schema", self.json_schema, strict=False, tokenizer=tokenizer)
        if fmt.type == "json_object":
            return constraint("response_format.schema", fmt.schema_, json_object=True, tokenizer=tokenizer)
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise BadSetting("response_format.json_schema.schema", "is required for type json_schema")
        return constraint("response_format.json_schema.schema", fmt.json_schema.schema_, strict=bool(fmt.json_schema.strict), tokenizer=tokenizer)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    tools: Optional[list] = None  # OpenAI's [{"type": "function", "function": {...}}], checked by grammar/tools.tools_of
    tool_choice: Union[str, dict, None] = None
    parallel_tool_calls: Optional[bool] = None

    def conversation(self) -> list[dict]:
        """The messages as Hugging Face's chat templates read them: OpenAI's "developer" is the system
        role, an assistant's tool calls carry their arguments as objects, a tool result its call's id
        and name. A tool message must answer a call made before it (BadSetting naming it)."""
        out: list[dict] = []
        calls: dict[str, str] = {}  # id -> function name, of the calls made so far
        for i, m in enumerate(self.messages):
            where = f"messages.{i}"
            message = {"role": "system" if m.role == "developer" else m.role, "content": m.text(where)}
            if m.name is not None:
                message["name"] = m.name
            if m.tool_calls:
                if m.role != "assistant":
                    raise BadSetting(f"{where}.tool_calls", "belong to assistant messages only")
                message["tool_calls"] = [self._call(call, f"{where}.tool_calls.{j}") for j, call in enumerate(m.tool_calls)]
                calls.update((call.id, call.function.name) for call in m.tool_calls)
                if not m.content:
                    message["content"] = None
            if m.role == "tool":
                if m.tool_call_id is None:
                    raise BadSetting(f"{where}.tool_call_id", "is required in a tool message")
                if m.tool_call_id not in calls:
                    raise BadSetting(f"{where}.tool_call_id", f"{m.tool_call_id!r} answers no tool call of an earlier assistant message")
                message["tool_call_id"] = m.tool_call_id
                message.setdefault("name", calls[m.tool_call_id])
            out.append(message)
        return out

    @staticmethod
    def _call(call: ToolCall, where: str) -> dict:
        try:
            arguments = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise BadSetting(f"{where}.function.arguments", f"is not JSON: {exc.msg} at column {exc.colno}") from None
        return {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}

    def tool_request(self) -> "ToolRequest | None":
        """The tools, the choice among them and whether several calls may come at once; None without tools."""
        if not self.tools:
            if self.tool_choice not in (None, "none", "auto"):
                raise BadSetting("tool_choice", "needs tools")
            return None
        try:
            tools = tuple(tools_of(self.tools))
        except GrammarError as exc:
            raise BadSetting("tools", str(exc)) from None
        try:
            choice = ToolChoice.of(self.tool_choice, tools)
        except GrammarError as exc:
            raise BadSetting("tool_choice", str(exc)) from None
        return ToolRequest(tools, choice, self.parallel_tool_calls is not False)


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
class ToolRequest:
    """A chat request's tools (grammar/tools.Tool), the choice among them, and whether a reply may make several calls."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool


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
    tools: ToolRequest | None = None  # chat with tools: planned against the chat template by the app (grammar/tools.plan)

    @classmethod
    def of(cls, request: _Common, defaults: Defaults, tokenizer=None) -> "Settings":
        """The request's settings; its constraint compiled and, where `tokenizer` (the target's
        grammar_tokenizer) is given, checked over the target's vocabulary."""
        unsupported = request.unsupported()
        if unsupported:
            name = unsupported[0]
            raise BadSetting(name, "is not supported by specdec serve (one answer per request; no penalties, logit_bias, functions, audio or echo)")
        tools = request.tool_request() if isinstance(request, ChatRequest) else None
        if tools is not None and tools.choice.mode != "none" and request.constraints():
            raise BadSetting(request.constraints()[0], "cannot be combined with tools: the reply is a tool call or free text (or send tool_choice none)")
        grammar = request.grammar_of(tokenizer)
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
            grammar=grammar,
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
            tools=tools,
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

