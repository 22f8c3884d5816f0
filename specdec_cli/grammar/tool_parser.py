"""Reading a tool-calling answer as it streams: content, and each call's name and arguments.

A `ToolParser` reads one answer in pieces of any size (tokens' text) and gives what each piece
makes known: ContentDelta (text for the user), CallStart (a call's index, id and function
name, once the name is complete) and ArgumentsDelta (pieces of the call's arguments, JSON text
as written: joined, they are the arguments object). `finish()` gives the whole `Reply`. Where a
family's calls sit in its answer is its `FORMATS` entry (tools.py finds the family):

    parser = ToolParser(FORMATS["generic"], lambda: "call_1")
    parser.feed('{"tool_calls": [{"name": "weather", "arguments": {"city": ')
        -> [CallStart(0, "call_1", "weather"), ArgumentsDelta(0, '{"city": ')]
    parser.feed('"Paris"}}]}')  -> [ArgumentsDelta(0, '"Paris"}')]
    parser.finish() -> Reply(None, [ToolCall("call_1", "weather", '{"city": "Paris"}')])

Text is held back only while it may still become an opener ("<tool_call>", "[TOOL_CALLS]"),
and whitespace until text follows it (whitespace around calls is the format's). Special tokens
must reach the parser as their text. A generic answer's {"response": "..."} streams as its
decoded characters (escapes, split \\u escapes and surrogate pairs included). A call whose
arguments did not close (an answer cut by max_tokens) is left out of `Reply.calls`; where JSON
was due and the text is not JSON (no grammar held it), the call is dropped and the text from
there on is content.

Left out: which family, the prompt and the grammar (tools.py); the wire format (serve/wire.py).
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass, field
from typing import Callable, Union

ALPHANUMERIC = string.ascii_letters + string.digits


@dataclass(frozen=True)
class ContentDelta:
    """Answer text for the user."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """Call `index` begins: its id and the function's name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgumentsDelta:
    """A piece of call `index`'s arguments (JSON text); the pieces joined are the arguments object."""

    index: int
    text: str


Delta = Union[ContentDelta, CallStart, ArgumentsDelta]


@dataclass(frozen=True)
class ToolCall:
    """One finished call: `arguments` is the JSON text of its arguments object."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """A whole answer: its text (None where there are calls and no text) and its complete calls."""

    content: str | None
    calls: list[ToolCall]



# -- the parser -------------------------------------------------------------------------------------


def call_ids(family: str) -> Callable[[], str]:
    """Random call ids in the family's form: Mistral's 9 alphanumerics, else "call_" and 24 hex digits."""
    if family == "mistral":
        return lambda: "".join(secrets.choice(ALPHANUMERIC) for _ in range(9))
    return lambda: "call_" + secrets.token_hex(12)


@dataclass(frozen=True)
class _Format:
    """Where a family's calls sit in its answer."""

    opener: str | None  # the text that starts the calls; None: the answer is JSON if it starts with "{", else text
    closer: str | None  # the text after each call's JSON (hermes)
    calls_at: tuple[str, ...]  # the path of call objects in the JSON value ("[]": an array's item)
    arguments: str  # the key of a call's arguments
    content_at: tuple[str, ...] | None = None  # the path of a string that is the answer's text (generic)


FORMATS = {
    "hermes": _Format("<tool_call>", "</tool_call>", (), "arguments"),
    "mistral": _Format("[TOOL_CALLS]", None, ("[]",), "arguments"),
    "llama3": _Format(None, None, (), "parameters"),
    "generic": _Format(None, None, ("tool_calls", "[]"), "arguments", ("response",)),
}


@dataclass
class _Call:
    index: int = -1  # set by its CallStart
    id: str = ""
    name: list[str] = field(default_factory=list)
    named: bool = False  # the name's string has ended
    arguments: list[str] = field(default_factory=list)
    complete: bool = False  # the arguments' value has ended


class ToolParser:
    """One answer, read as it streams: `feed` each piece, `end` for what was held back, `finish` for the Reply."""

    def __init__(self, form: _Format | None, new_id: Callable[[], str]) -> None:
        self.form = form  # None: tool_choice none, all text
        self.new_id = new_id
        self.state = "start" if form is not None and form.opener is None else "text"
        self.held = ""  # text that may still be an opener, or whitespace that may be the format's
        self.closing = ""  # the part of the closer read so far
        self.scan: _JsonScan | None = None
        self.calls: list[_Call] = []
        self.started: list[_Call] = []  # calls with a CallStart, in index order
        self.capturing: _Call | None = None  # the call whose arguments' value is being read
        self.content: list[str] = []
        self.out: list[tuple[Delta, list[str]]] = []  # this piece's deltas, each with the text that follows its own
        self.ended = False

    # what comes out

    def _emit(self, delta: Delta) -> None:
        """Add a delta to this piece's; text of consecutive content (or one call's arguments) is joined."""
        if isinstance(delta, (ContentDelta, ArgumentsDelta)) and not delta.text:
            return
        if isinstance(delta, ContentDelta):
            self.content.append(delta.text)
        last = self.out[-1] if self.out else None
        if isinstance(delta, CallStart) or last is None or type(last[0]) is not type(delta) or (
            isinstance(delta, ArgumentsDelta) and last[0].index != delta.index
        ):
            self.out.append((delta, []))
        else:
            last[1].append(delta.text)

    def _taken(self) -> list[Delta]:
        """This piece's deltas, each run of text joined."""
        out = []
        for delta, more in self.out:
            if more and isinstance(delta, ContentDelta):
                delta = ContentDelta(delta.text + "".join(more))
            elif more and isinstance(delta, ArgumentsDelta):
                delta = ArgumentsDelta(delta.index, delta.text + "".join(more))
            out.append(delta)
        self.out = []
        return out

    def feed(self, text: str) -> list[Delta]:
        """The deltas that `text`, the answer's next piece, makes known."""
        assert not self.ended, "feed after end"
        if self.form is None:
            self._emit(ContentDelta(text))
            return self._taken()
        for ch in text:
            self._char(ch)
        return self._taken()

    def end(self) -> list[Delta]:
        """The answer has ended: the deltas of what was held back (text that did not become an opener,
        whitespace that turned out to be content)."""
        if not self.ended:
            self.ended = True
            if self.held and not (self.started and not self.held.strip()):
                self._emit(ContentDelta(self.held))
            self.held = ""
        return self._taken()

    def finish(self) -> Reply:
        """The whole answer: its text and its complete calls (see the module docstring on answers cut short)."""
        self.end()
        calls = [ToolCall(call.id, "".join(call.name), "".join(call.arguments)) for call in self.started if call.complete]
        content = "".join(self.content)
        return Reply(None if calls and not content.strip() else content, calls)

    # reading, one character at a time

    def _char(self, ch: str) -> None:
        form = self.form
        assert form is not None
        if self.state == "start":  # llama3, generic: JSON if the answer starts with "{"
            if ch == "{":
                self._open_json()
                self._json(ch)
            else:
                self.state = "text"
                self._text(ch)
        elif self.state == "text":
            self._text(ch)
        elif self.state == "json":
            self._json(ch)
        elif self.state == "close":
            self._close(ch)
        else:  # "rest": after a JSON value that went wrong, all text
            self._emit(ContentDelta(ch))

    def _text(self, ch: str) -> None:
        """Free text: content, but for a possible opener's start and whitespace, which are held."""
        self.held += ch
        opener = self.form.opener if self.form else None
        if opener and self.held.endswith(opener):
            before = self.held[: -len(opener)]
            self._emit(ContentDelta(before[: len(before.rstrip())]))  # whitespace before an opener is the format's
            self.held = ""
            self._open_json()
            return
        keep = 0
        if opener:
            keep = next((k for k in range(min(len(opener) - 1, len(self.held)), 0, -1) if opener.startswith(self.held[-k:])), 0)
        head = self.held[: len(self.held) - keep]
        text = head.rstrip()
        self._emit(ContentDelta(text))
        self.held = self.held[len(text) :]

    def _open_json(self) -> None:
        self.state = "json"
        self.scan = _JsonScan()

    def _close(self, ch: str) -> None:
        """After a hermes call: whitespace, then the closer; anything else is text again."""
        closer = self.form.closer if self.form else None
        assert closer is not None
        if not self.closing and ch.isspace():
            return
        self.closing += ch
        if self.closing == closer:
            self.closing, self.state = "", "text"
        elif not closer.startswith(self.closing):
            pending, self.closing, self.state = self.closing, "", "text"
            for c in pending:
                self._text(c)

    def _json(self, ch: str) -> None:
        form, scan = self.form, self.scan
        assert form is not None and scan is not None
        belongs = self.capturing is not None
        for event in scan.feed(ch):
            kind, path = event[0], event[1]
            if kind == "begin":
                if path == form.calls_at and ch == "{":
                    self.calls.append(_Call())
                elif self._in_call(path, form.arguments):
                    self.capturing, belongs = self.calls[-1], True
            elif kind == "chars":
                if self._in_call(path, "name"):
                    self.calls[-1].name.append(event[2])
                elif path == form.content_at:
                    self._emit(ContentDelta(event[2]))
            elif kind == "end":
                if self._in_call(path, "name"):
                    self._named(self.calls[-1])
                elif self._in_call(path, form.arguments):
                    if not event[2]:
                        belongs = False  # a scalar ends on the character after it
                    self.capturing.complete = True
                    self.capturing = None
                if not path:  # the answer's JSON value has ended
                    self.state = "close" if form.closer else "text"
            elif kind == "error":
                self.capturing = None
                self.state = "rest"
                self._emit(ContentDelta(ch))
                return
        if belongs:
            call = self.calls[-1]
            call.arguments.append(ch)
            if call.named:
                self._emit(ArgumentsDelta(call.index, ch))

    def _named(self, call: _Call) -> None:
        """The call's name is known: its CallStart, then any arguments read before it."""
        if not call.named:
            call.named = True
            call.index, call.id = len(self.started), self.new_id()
            self.started.append(call)
            self._emit(CallStart(call.index, call.id, "".join(call.name)))
            if call.arguments:
                self._emit(ArgumentsDelta(call.index, "".join(call.arguments)))

    def _in_call(self, path: tuple, key: str) -> bool:
        form = self.form
        assert form is not None
        return bool(self.calls) and len(path) == len(form.calls_at) + 1 and path[:-1] == form.calls_at and path[-1] == key


class _JsonScan:
    """An incremental JSON reader, one character at a time, that says where values begin and end.

    `feed(ch)` returns events: ("begin", path) a value starts with this character; ("end", path,
    inclusive) a value ended (inclusive: this character is its last; a number or literal ends on
    the character after it); ("chars", path, text) decoded characters of a string value;
    ("error", path) the text is not JSON. A path is the keys down to the value, "[]" for an
    array's item. Example: feeding '{"a": [1]}' gives ("begin", ()), ("begin", ("a",)),
    ("begin", ("a", "[]")), ("end", ("a", "[]"), False), ("end", ("a",), True), ("end", (), True).
    """

    ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

    def __init__(self) -> None:
        self.stack: list[str] = []  # open containers, "{" or "["
        self.keys: list[str] = []  # per open container: the current key ("[]" in arrays)
        self.state = "value"
        self.is_key = False
        self.key: list[str] = []
        self.hex = ""
        self.high: int | None = None  # a \\uD8xx escape waiting for its low surrogate

    def path(self) -> tuple[str, ...]:
        return tuple(self.keys)

    def feed(self, ch: str) -> list[tuple]:
        events: list[tuple] = []
        self._step(ch, events)
        return events

    def _step(self, ch: str, events: list[tuple]) -> None:
        state = self.state
        if state in ("value", "first_item"):
            if ch.isspace():
                return
            if state == "first_item" and ch == "]":
                self._close(ch, events)
            elif ch in "{[":
                events.append(("begin", self.path()))
                self.stack.append(ch)
                self.keys.append("" if ch == "{" else "[]")
                self.state = "first_key" if ch == "{" else "first_item"
            elif ch == '"':
                events.append(("begin", self.path()))
                self.state, self.is_key = "string", False
            elif ch in "-0123456789tfn":
                events.append(("begin", self.path()))
                self.state = "scalar"
            else:
                self._error(events)
        elif state in ("key", "first_key"):
            if ch.isspace():
                return
            if ch == '"':
                self.state, self.is_key, self.key = "string", True, []
            elif state == "first_key" and ch == "}":
                self._close(ch, events)
            else:
                self._error(events)
        elif state == "colon":
            if ch == ":":
                self.state = "value"
            elif not ch.isspace():
                self._error(events)
        elif state == "after":
            if ch.isspace():
                return
            if ch == "," and self.stack:
                self.state = "key" if self.stack[-1] == "{" else "value"
            elif ch in "}]":
                self._close(ch, events)
            else:
                self._error(events)
        elif state == "string":
            if ch == '"':
                self._string_char(None, events)
                if self.is_key:
                    self.keys[-1] = "".join(self.key)
                    self.state = "colon"
                else:
                    self._ended(events, True)
            elif ch == "\\":
                self.state = "escape"
            else:
                self._string_char(ch, events)
        elif state == "escape":
            if ch == "u":
                self.state, self.hex = "unicode", ""
            elif ch in self.ESCAPES:
                self.state = "string"
                self._string_char(self.ESCAPES[ch], events)
            else:
                self._error(events)
        elif state == "unicode":
            if ch not in string.hexdigits:
                self._error(events)
                return
            self.hex += ch
            if len(self.hex) == 4:
                self.state = "string"
                self._unit(int(self.hex, 16), events)
        elif state == "scalar":
            if ch.isalnum() or ch in "+-.":
                return
            self._ended(events, False)
            self._step(ch, events)
        elif state == "done":
            if not ch.isspace():
                self._error(events)
        # "error": nothing more

    def _unit(self, unit: int, events: list[tuple]) -> None:
        """One \\uXXXX escape: a character, or half of a surrogate pair (a lone half reads as U+FFFD)."""
        if 0xD800 <= unit < 0xDC00:
            self._string_char(None, events)
            self.high = unit
        elif 0xDC00 <= unit < 0xE000 and self.high is not None:
            pair = 0x10000 + ((self.high - 0xD800) << 10) + (unit - 0xDC00)
            self.high = None
            self._string_char(chr(pair), events)
        else:
            self._string_char("\ufffd" if 0xD800 <= unit < 0xE000 else chr(unit), events)

    def _string_char(self, text: str | None, events: list[tuple]) -> None:
        """Decoded text of the string being read (None: only settle a waiting high surrogate)."""
        if self.high is not None:
            self.high = None
            self._string_char("\ufffd", events)
        if text is None:
            return
        if self.is_key:
            self.key.append(text)
        else:
            events.append(("chars", self.path(), text))

    def _close(self, ch: str, events: list[tuple]) -> None:
        if not self.stack or {"{": "}", "[": "]"}[self.stack[-1]] != ch:
            self._error(events)
            return
        self.stack.pop()
        self.keys.pop()
        self._ended(events, True)

    def _ended(self, events: list[tuple], inclusive: bool) -> None:
        events.append(("end", self.path(), inclusive))
        self.state = "after" if self.stack else "done"

    def _error(self, events: list[tuple]) -> None:
        self.state = "error"
        events.append(("error", self.path()))
