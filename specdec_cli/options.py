"""What every setting means, once, for the command line, the bench and the server alike.

Each setting has one check or parser here: its range, its default where the core has one,
and its message. A value out of range raises `BadSetting`, which names the setting; the
command line shows it as its flag, the server as its field:

    check_sampling_options(0.8, 40, 1.5, 0.05, 256)
    -> BadSetting: str() "--top-p must be in (0, 1], got 1.5"  (cli: one line, exit 2)
                   .setting "top_p", .field_message "top_p must be in (0, 1], got 1.5"  (serve: 400, param)

Lists are comma-separated: parse_draft_tokens("auto,4,1,2") -> (1, 2, 4, 'auto').

Left out: declaring flags (cli/options.py), request fields (serve/types.py), the bench's
sweep defaults (bench/model.py).
"""

from __future__ import annotations

import json
import logging
import math

from .errors import BadInput, GrammarError
from .events import AUTO, MAX_DRAFT_TOKENS, DraftTokens
from .maths.speculative import DEFAULT_VERIFY, VERIFIERS  # noqa: F401  DEFAULT_VERIFY: the front-ends read it here

log = logging.getLogger("specdec")

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs
DRAFTERS = ("model", "lookup", "model+lookup", "cascade", "none")  # see drafting/ and session.LoadedPair.engine; none: target-only
VERIFY_RULES = (*VERIFIERS, AUTO)  # ("token", "block", "auto"): speculative.verify, speculative.verify_block, rule_choice.AutoRule
DEFAULT_CTX = 2048
PASS_TIMEOUT = 60.0  # serve --pass-timeout: seconds a model pass may take before the server counts itself stalled

# What the C fields behind the settings hold (llama.cpp's n_ctx is uint32_t, n_threads and
# n_gpu_layers int32_t); numpy seeds a generator from any integer >= 0, and 2**64 - 1 keeps
# a seed one machine word (llama.cpp's own --seed is 32-bit).
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
SEED_MAX = 2**64 - 1


class BadSetting(BadInput):
    """A setting's value that cannot be used: `setting` is its name (top_p), the message says why.

    str() names the command line's flag (--top-p), `field_message` the request field (top_p).
    """

    def __init__(self, setting: str, requirement: str) -> None:
        self.setting = setting
        self.requirement = requirement
        super().__init__(f"{flag(setting)} {requirement}")

    @property
    def field_message(self) -> str:
        return f"{self.setting} {self.requirement}"


def flag(setting: str) -> str:
    """The command line's flag for a setting. Example: 'top_p' -> '--top-p'."""
    return "--" + setting.replace("_", "-")


def option_list(values) -> str:
    """A tuple of setting values as its comma-separated flag text. Example: (2, 'auto') -> '2,auto'; (0.0, 0.7) -> '0,0.7'."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def check_load_limits(ctx: int | None, draft_ctx: int | None, threads: int | None, gpu_layers: int = -1, draft_gpu_layers: int = -1) -> None:
    """Values the C types behind them cannot hold (llama.cpp would wrap --ctx 4294967552 to 256)."""
    for setting, value, top, unit in (
        ("ctx", ctx, UINT32_MAX, " tokens"),
        ("draft_ctx", draft_ctx, UINT32_MAX, " tokens"),
        ("threads", threads, INT32_MAX, ""),
    ):
        if value is not None and value < 1:
            raise BadSetting(setting, f"must be at least 1{unit.rstrip('s')}, got {value}")
        if value is not None and value > top:
            raise BadSetting(setting, f"must be at most {top}{unit} (what llama.cpp's C type holds), got {value}")
    for setting, value in (("gpu_layers", gpu_layers), ("draft_gpu_layers", draft_gpu_layers)):
        if not -1 <= value <= INT32_MAX:
            raise BadSetting(setting, f"must be -1 (all) or between 0 and {INT32_MAX}, got {value}")


def check_seed(seed: int | None, repeats: int = 1) -> None:
    """A seed numpy and the reports can use: 0 to 2**64 - 1 (for bench, the last repeat's seed too)."""
    if seed is not None and not (0 <= seed and seed + repeats - 1 <= SEED_MAX):
        raise BadSetting("seed", f"must be between 0 and {SEED_MAX - repeats + 1}, got {seed}")


def check_draft_tokens(draft_tokens: DraftTokens) -> None:
    if draft_tokens != AUTO and not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise BadSetting("draft_tokens", f"must be between 1 and {MAX_DRAFT_TOKENS}, got {draft_tokens}")


def parse_draft_tokens(text: str) -> tuple[DraftTokens, ...]:
    """'auto,4,1,2' -> (1, 2, 4, 'auto'): numbers sorted, then auto; without repeats, each in 1..64."""
    items = [v.lower() for v in _items(text)]
    wrong = BadSetting("draft_tokens", f"takes whole numbers and/or auto, such as 8, auto or 1,2,4,8,auto; got {text!r}")
    try:
        values: list[DraftTokens] = sorted({int(v) for v in items if v != AUTO})
    except ValueError:
        raise wrong from None
    if not items:
        raise wrong
    for k in values:
        check_draft_tokens(k)
    return tuple(values) + ((AUTO,) if AUTO in items else ())


def parse_draft_length(text: str) -> DraftTokens:
    """One draft_tokens value (run, serve): 'auto' or a number. Example: '8' -> 8, 'AUTO' -> 'auto'."""
    values = parse_draft_tokens(text)
    if len(values) != 1:
        raise BadSetting("draft_tokens", f"takes one value here, auto or a number such as 8; got {text!r}")
    return values[0]


def parse_drafters(text: str) -> tuple[str, ...]:
    """'lookup,model' -> ('lookup', 'model'): in the order given, without repeats."""
    values = list(dict.fromkeys(v.lower() for v in _items(text)))
    unknown = [v for v in values if v not in DRAFTERS]
    if not values or unknown:
        raise BadSetting("drafter", f"takes a comma-separated list of {', '.join(DRAFTERS)}, got {text!r}")
    return tuple(values)


def parse_drafter(text: str) -> str:
    """One drafter value (run, serve). Example: 'Lookup' -> 'lookup'."""
    name = text.strip().lower()
    if name not in DRAFTERS:
        raise BadSetting("drafter", f"must be one of {', '.join(DRAFTERS)}, got {text!r}")
    return name


def parse_verify(text: str) -> str:
    """One verify rule (run, bench, audit, serve), or auto (chosen each round: tuning/rule_choice.py). Example: 'Block' -> 'block'."""
    name = text.strip().lower()
    if name not in VERIFY_RULES:
        raise BadSetting("verify", f"must be one of {', '.join(VERIFY_RULES)}, got {text!r}")
    return name


def parse_temperatures(text: str) -> tuple[float, ...]:
    """'0,0.7' -> (0.0, 0.7): in the order given, without repeats, each 0 or more."""
    try:
        values = list(dict.fromkeys(float(v) for v in _items(text)))
    except ValueError:
        raise BadSetting("temperature", f"takes a comma-separated list of numbers such as 0,0.7, got {text!r}") from None
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise BadSetting("temperature", f"values must be 0 (greedy) or more, got {text!r}")
    return tuple(values)


def _items(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def check_sampling_options(temperature: float, top_k: int, top_p: float, min_p: float, max_tokens: int) -> None:
    if not (math.isfinite(temperature) and temperature >= 0):
        raise BadSetting("temperature", f"must be 0 (greedy) or more, got {temperature}")
    if top_k < 0:
        raise BadSetting("top_k", f"must be 0 (off) or more, got {top_k}")
    if not 0 < top_p <= 1:
        raise BadSetting("top_p", f"must be in (0, 1], got {top_p}")
    if not 0 <= min_p < 1:
        raise BadSetting("min_p", f"must be in [0, 1), got {min_p}")
    if max_tokens < 1:
        raise BadSetting("max_tokens", f"must be at least 1, got {max_tokens}")


MAX_STOPS = 16  # stop strings a generation takes (each is searched for at every token)
MAX_STOP_CHARS = 1000  # characters in one stop string


def check_stops(stops) -> None:
    """Stop strings end the output just before them: an empty one would end it at once, and each
    costs time at every token, so there are at most MAX_STOPS of at most MAX_STOP_CHARS characters.
    Example: ["a" * 1001] -> BadSetting("stop", "must be at most 1000 characters each, got one of 1001")."""
    if any(not s for s in stops):
        raise BadSetting("stop", "must not be an empty string")
    if len(stops) > MAX_STOPS:
        raise BadSetting("stop", f"must be at most {MAX_STOPS} strings, got {len(stops)}")
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise BadSetting("stop", f"must be at most {MAX_STOP_CHARS} characters each, got one of {longest}")


def check_draft_cache_size(tokens: int) -> None:
    """How many tokens a draft cache (drafting/memory.py) keeps: at least 1."""
    if tokens < 1:
        raise BadSetting("draft_cache_size", f"must be at least 1 token, got {tokens}")


def check_p_min(p_min: float | None) -> None:
    """p_min is a probability (None: the policy's default). Example: 1.5 -> BadSetting."""
    if p_min is not None and not 0 <= p_min <= 1:
        raise BadSetting("p_min", f"must be in [0, 1], got {p_min}")


def gpu_layers_to_load(gpu_layers: int, draft_gpu_layers: int) -> tuple[int, int]:
    """The layer counts to load with. Asking for GPU layers without a GPU backend warns once, then runs on the CPU."""
    from .llama.platform import gpu_offload_supported

    asked = [f"{flag(s)} {n}" for s, n in (("gpu_layers", gpu_layers), ("draft_gpu_layers", draft_gpu_layers)) if n > 0]
    if asked and not gpu_offload_supported():
        log.warning("llama.cpp was built without a GPU backend; ignoring %s and running on the CPU", " and ".join(asked))
        return 0, 0
    return gpu_layers, draft_gpu_layers


def context_size(ctx: int | None, pair_name: str | None) -> int:
    """ctx if given, else the named pair's suggested context, else 2048."""
    if ctx is None:
        if pair_name is None:
            return DEFAULT_CTX
        from .models.catalogue import find_pair

        return find_pair(pair_name).ctx
    if ctx < 1:
        raise BadSetting("ctx", f"must be at least 1 token, got {ctx}")
    return ctx


CONSTRAINTS = ("json_schema", "grammar")  # the settings that constrain the output (run --json-schema/--grammar, serve's fields)


def constraint(setting: str, value, *, strict: bool = True, json_object: bool = False, tokenizer=None):
    """A constraint setting compiled (grammar/compile.py), checked over `tokenizer`'s vocabulary
    where given; BadSetting naming the setting with llguidance's reason otherwise. `json_schema`
    takes a schema (a dict, or JSON text); `grammar` a llama.cpp GBNF grammar; `json_object` any
    JSON object, or one valid against the schema where one is given (llama-server's form).
    Example: constraint("json_schema", '{"type": "integer"}').kind -> "json_schema";
    constraint("grammar", 'root ::= "a') -> BadSetting: grammar the GBNF grammar cannot be used: ..."""
    from .grammar import compile as grammars  # llguidance: only when a constraint is asked for, not on --help's path

    try:
        if setting == "grammar":
            if not isinstance(value, str) or not value.strip():
                raise GrammarError("must be a GBNF grammar: text with a root rule, such as root ::= \"yes\" | \"no\"")
            compiled = grammars.gbnf(value)
        else:
            schema = value
            if isinstance(value, str):
                try:
                    schema = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise GrammarError(f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
            compiled = grammars.json_object(schema) if json_object else grammars.json_schema(schema, strict=strict)
        return grammars.check(compiled, tokenizer) if tokenizer is not None else compiled
    except GrammarError as exc:
        raise BadSetting(setting, str(exc)) from None
