"""Token bytes to released text: UTF-8 decoding and stop strings, cut exactly.

`TextStream` turns each generated token's bytes into a `Token` event carrying the text it
releases. A token whose text might still be the start of a stop string is held back until
that is settled; a stop string found anywhere (also across tokens and rounds) ends the
output exactly before it. Example with stop="\\n\\n": pieces "a", "\\n", "\\nb" release
"a", then stop with the text "a\\n" cut to "a".

Left out: where the bytes come from (engine.py calls `push` for every emitted token).
"""

from __future__ import annotations

import codecs
from typing import Sequence

from ..events import Logprobs, Source, Token


class TextStream:
    """Turns token bytes into text, holding back what might still become a stop string.

    Tokens are queued with their text until no stop string can start inside it; then they
    are released. A stop string found anywhere (also across tokens or rounds) cuts the
    output exactly before it. Example with stop="\\n\\n": pieces "a", "\\n", "\\nb" release
    "a", then stop with the text "a\\n" cut to "a".
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""  # all text decoded so far
        self.released = 0  # characters of `text` already handed out
        self._pending: list[tuple[int, Source, int, int, Logprobs | None]] = []  # (id, source, position, end offset in text, logprobs)
        self.tokens: list[int] = []  # ids released so far
        self.stopped = False

    def push(self, token: int, piece: bytes, source: Source, position: int, logprobs: Logprobs | None = None) -> list[Token]:
        self.text += self._decoder.decode(piece)
        self._pending.append((token, source, position, len(self.text), logprobs))
        return self._release(final=False)

    def flush(self) -> list[Token]:
        self.text += self._decoder.decode(b"", final=True)
        if self._pending:
            tok, src, pos, _, lp = self._pending[-1]
            self._pending[-1] = (tok, src, pos, len(self.text), lp)
        return self._release(final=True)

    def _release(self, final: bool) -> list[Token]:
        limit = len(self.text)
        if self.stop:
            window_start = max(0, self.released - max(map(len, self.stop)))
            hits = [i for i in (self.text.find(s, window_start) for s in self.stop) if i >= 0]
            if hits:
                limit = min(hits)
                self.stopped = True
            elif not final:
                limit -= self._held_back()
        # The newest token waits while the decoder holds its unfinished UTF-8 bytes: if the
        # text ends there, flush() gives it the replacement character those bytes decode to.
        unfinished = not final and not self.stopped and self._decoder.getstate()[0] != b""
        out: list[Token] = []
        while self._pending:
            tok, src, pos, end, lp = self._pending[0]
            if unfinished and len(self._pending) == 1:
                break
            if end > limit and not self.stopped:
                break
            if self.stopped and self.released >= limit and end > limit:
                break  # nothing of this token lies before the stop string
            piece = self.text[self.released : min(end, limit)]
            self.released = min(end, limit)
            self._pending.pop(0)
            self.tokens.append(tok)
            out.append(Token(tok, piece, src, pos, lp))
        if self.stopped:
            self._pending.clear()
            self.text = self.text[:limit]
        return out

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:n]):
                    best = n
                    break
        return best
