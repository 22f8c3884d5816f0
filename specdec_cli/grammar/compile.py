"""What a constraint is, compiled: a JSON schema, any JSON object, a GBNF, Lark or regex grammar.

A `Grammar` is llguidance's grammar text (its JSON form) and the kind it came from. Compiling
checks it once, without a model (`check`); a sequence then starts a matcher over the target's
vocabulary from it (`Grammar.matcher`, guide.py). Everything a user sends is bounded by the
limits below, each named in the error that refuses it:

    json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}).kind  -> "json_schema"
    gbnf('root ::= "yes" | "no"')                                                  -> Grammar("gbnf", ...)
    json_schema({"type": "foo"})  -> GrammarError("the JSON schema cannot be used: Invalid type: foo")

JSON is written in one layout: no whitespace but one space after each ':' and ',' (`{"a": 1,
"b": true}`), the layout small models write most; so every key, quote, colon and comma of a
fixed-key object is a token the grammar forces (guide.py: forced tokens are free drafts). A
schema may choose another layout with llguidance's own "x-guidance" key (for example
{"whitespace_flexible": true}). `strict` (OpenAI's) makes a keyword llguidance does not
implement an error; without it such keywords are ignored.

Left out: the state of one generation (guide.py), tool calls (tools.py), the vocabulary's
tokenizer (llama/model.py builds it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import llguidance

from ..errors import GrammarError

# Limits on what a request may constrain with. The text of a schema or grammar:
MAX_GRAMMAR_CHARS = 200_000
# llguidance's resource limits (its LLParserLimits), set here so that the docs can name them:
# compiling the lexer (about 50k units a millisecond: ~40 ms), one token's mask (about 14k units
# a millisecond: ~15 ms at worst), Earley items per token, the grammar's size in symbols.
COMPILE_FUEL = 2_000_000
STEP_FUEL = 200_000
STEP_ITEMS = 50_000
MAX_GRAMMAR_SYMBOLS = 500_000
LIMITS = llguidance.LLParserLimits(
    initial_lexer_fuel=COMPILE_FUEL, step_lexer_fuel=STEP_FUEL, step_max_items=STEP_ITEMS, max_grammar_size=MAX_GRAMMAR_SYMBOLS
)
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
KINDS = ("json_schema", "json_object", "gbnf", "lark", "regex", "tools")


@dataclass(frozen=True)
class Grammar:
    """A checked constraint: llguidance's grammar text and the kind it came from (KINDS)."""

    kind: str
    source: str

    def matcher(self, tokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher:
        """A fresh matcher over a vocabulary (llama/model.LlamaModel.grammar_tokenizer); GrammarError
        where the grammar cannot be built over it."""
        matcher = llguidance.LLMatcher(tokenizer, self.source, log_level=0, limits=LIMITS)
        if matcher.is_error():
            raise GrammarError(f"the {describe(self.kind)} cannot be used: {matcher.get_error()}")
        return matcher


def describe(kind: str) -> str:
    """A kind as a message names it. Example: 'gbnf' -> 'GBNF grammar'."""
    return {"json_schema": "JSON schema", "json_object": "JSON object constraint", "gbnf": "GBNF grammar",
            "lark": "Lark grammar", "regex": "regular expression", "tools": "tool list"}[kind]  # fmt: skip


def _bounded(text: str, kind: str) -> str:
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"the {describe(kind)} is {len(text):,} characters; at most {MAX_GRAMMAR_CHARS:,} are accepted (MAX_GRAMMAR_CHARS)")
    return text


def check(grammar: Grammar, tokenizer: llguidance.LLTokenizer | None = None) -> Grammar:
    """The grammar, once llguidance has compiled it within LIMITS (over `tokenizer`'s vocabulary if
    given, and computed its first mask there: llguidance builds its lexer lazily, so that is where
    a limit is met first); GrammarError with llguidance's reason otherwise."""
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar.source, tokenizer, limits=LIMITS)
    if failed:
        raise GrammarError(f"the {describe(grammar.kind)} cannot be used: {_reason(messages[0])}")
    if tokenizer is not None:
        matcher = grammar.matcher(tokenizer)
        matcher.compute_bitmask()
        if matcher.is_error():
            raise GrammarError(f"the {describe(grammar.kind)} cannot be used: {_reason(matcher.get_error())}")
    return grammar


def _reason(message: str) -> str:
    """llguidance's message on one line, the limit named where it names its own field."""
    text = " ".join(message.split())
    for field, name in (("initial_lexer_fuel", "COMPILE_FUEL"), ("step_lexer_fuel", "STEP_FUEL"), ("step_max_items", "STEP_ITEMS"),
                        ("max_grammar_size", "MAX_GRAMMAR_SYMBOLS")):  # fmt: skip
        text = text.replace(field, f"{field} ({name})")
    return text


def json_schema_text(schema: dict | bool, strict: bool = True) -> str:
    """A JSON schema as the grammar text of its llguidance grammar (the layout above; `strict`:
    unknown keywords are errors). Embedded in larger grammars by tools.py."""
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"a JSON schema must be an object, not {type(schema).__name__}")
    text = _bounded(json.dumps(schema, ensure_ascii=False), "json_schema")
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_LAYOUT, overrides={"lenient": not strict})
    except ValueError as exc:
        raise GrammarError(f"the JSON schema cannot be used: {exc}") from None


def json_schema(schema: dict | bool, strict: bool = True) -> Grammar:
    """Output that is one JSON value valid against `schema`. Example: json_schema({"type": "integer"}) -> 1, -7, 42 ..."""
    return check(Grammar("json_schema", json_schema_text(schema, strict)))


def json_object(schema: dict | None = None) -> Grammar:
    """Any JSON object (OpenAI's json_object), or one valid against `schema` where given (llama-server's form)."""
    return check(Grammar("json_object", json_schema_text(schema if schema is not None else {"type": "object"}, strict=False)))


def gbnf(text: str) -> Grammar:
    """A llama.cpp GBNF grammar (its root rule is the output). Example: gbnf('root ::= "yes" | "no"')."""
    try:
        source = llguidance.grammar_from("gbnf", _bounded(text, "gbnf"))
    except ValueError as exc:
        raise GrammarError(f"the GBNF grammar cannot be used: {_reason(str(exc))}") from None
    return check(Grammar("gbnf", source))


def lark(text: str) -> Grammar:
    """A grammar in llguidance's Lark syntax (its start rule is the output)."""
    return check(Grammar("lark", llguidance.LLMatcher.grammar_from_lark(_bounded(text, "lark"))))


def regex(pattern: str) -> Grammar:
    """Output that matches a regular expression whole. Example: regex(r"[0-9]{3}") -> "042"."""
    return check(Grammar("regex", llguidance.LLMatcher.grammar_from_regex(_bounded(pattern, "regex"))))
