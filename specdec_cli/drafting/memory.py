"""A drafting memory that outlives the call: earlier prompts and outputs, indexed for lookup.

SuffixDecoding (Oliaro, Jia, Campos, Qiao, NeurIPS 2025) drafts from a suffix index over the
prompt, the output so far and earlier outputs, and proposes more tokens the longer the
match. Here the lookup drafter (lookup.LookupDrafter) searches the context first, as prompt
lookup does, then this memory: the sequences of earlier generations (prompt + output),
indexed by their n-grams. A repetitive workload (the same JSON fields extracted from many
texts, a function edited call after call) finds its next tokens in what it wrote before.

    memory = DraftMemory(max_tokens=200_000)
    memory.add([5, 6, 7, 8, 9])              # an earlier call's prompt + output
    memory.match([1, 2, 6, 7])               # -> Recall(tokens=[8, 9], length=2)

Three levels: within a call (the context itself, in lookup.py), across calls of the CLI
(`--draft-cache FILE`: `load` and `save` below), across requests of `specdec serve` (one
memory kept in the worker). The memory holds at most `max_tokens` tokens; the oldest
sequences go first.

The memory also keeps what the proposals earned (`earned`: hits and trials per draft position,
by the policy's names "model", "lookup:2", "lookup:memory:6+", "cascade:memory:3-5", ..; and
the draft step's cost where a call timed it; events.Earned). The engine starts each call's
policy from it and writes back what the call learnt, so lookup's proposals, in the call's
context and in the memory, compete with the draft model on what they were worth in earlier
calls: a short call does not spend its first rounds trying each class of match on its prior
again (an extraction's one- and two-token matches mostly fail, call after call), nor climbing
to the draft model's long drafts on a text it drafts well (tuning/carried.py says how much the
model's record weighs). The cascade's draft-model rounds
("cascade:2") are not kept (`recalled`), and a cascade's call does not start from the draft
model's record (`resumed`).

A match proposes what followed it in an earlier call only as far as the earlier occurrences
that agree with the context about as long (RIVAL_SHARE) went on alike: after an extraction's
frame (`{"name": "`) every earlier call wrote another value, so none is proposed.

    memory.earned["lookup:memory:6+"] = Earned(hits=(1.2,), trials=(9.5,))   # a losing source
    recalled({"cascade:2": Earned((0.9,), (1.0,)), "lookup:memory:6+": Earned((1.2,), (9.5,))})  # -> the second only

The cache file is untrusted input. It is JSON with a format name, a version, a fingerprint
of the tokenizer that wrote it, the sequences and the earned record; `load` refuses a file
that is truncated, of another version, written by another tokenizer, over the size bound,
holding ids the vocabulary lacks or a malformed record, saying why in one line, and the
caller starts afresh (the next `save` rebuilds it). `save` merges with what another process
saved meanwhile, under an advisory lock (fcntl) on FILE.lock (the sequences are added; a
proposer's record is this process's where it holds one, the file's otherwise), and
replaces the file atomically (a temporary file, fsync, rename).

Left out: the n-gram table (ngram.py); proposing and verifying (lookup.py, maths/speculative.py); when to save (the CLI and the
server decide); what the record means and how it is learnt (tuning/carried.py, tuning/estimates.py).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..atomic import locked, replace_atomically
from ..errors import BadInput
from ..events import MAX_DRAFT_TOKENS, Earned
from .ngram import PLACES, RECALL_TOKENS, NgramTable, longest

FORMAT = "specdec-draft-cache"
VERSION = 4  # 2: the earned record per proposer; 3: with the draft model's, and each one's draft cost; 4: a memory match one earlier call alone continued has its own name ("lookup:memory:once:6+"). Older files are refused (and rebuilt)
MAX_EARNED = 256  # proposer names a file's record may hold (the policy's names are a few dozen)
EARNED_BYTES = MAX_EARNED * (MAX_DRAFT_TOKENS * 2 + 1) * 16  # the most JSON such a record takes (rounded counts, a cost)
NGRAM = 3  # the index's key: a sequence's last NGRAM tokens (shorter at its start)
DEFAULT_MAX_TOKENS = 200_000  # --draft-cache-size


# An earlier occurrence that agrees with the context's end for at least this share of the best
# one's agreement is its rival: where the two go on differently, the memory does not know what
# comes next, and its proposal stops there. An extraction's frame (`{"name": "` after the chat's
# header, `", "city": "`) is followed by another value in every earlier call, so the previous
# call's value is not proposed (where it was, it was rejected, and in model+lookup it displaced the
# draft model, which reads the value from this call's prompt: docs/benchmarks.md); a passage
# that earlier calls continued alike is proposed as before. Example: agreements 5 (then 40) and
# 3 (then 41): 3 < 0.75 x 5, no rival, 40 is proposed; agreements 6 and 5: rivals, nothing.
RIVAL_SHARE = 0.75


def uncontested(tokens: Sequence[int], rivals: Sequence[Sequence[int]]) -> int:
    """How many leading `tokens` no rival contradicts: each rival agrees up to its first differing
    token (one that ends first contradicts nothing further).
    Example: [8, 9, 4], rivals [[8, 9, 5], [8]] -> 2; no rivals -> 3."""
    n = len(tokens)
    for rival in rivals:
        n = min(n, next((i for i, (a, b) in enumerate(zip(tokens, rival)) if a != b), n))
    return n


class BadCache(BadInput):
    """A cache file that cannot be trusted; the message says why in one line."""


@dataclass(frozen=True)
class Recall:
    """What followed the longest earlier match of the context's end, how long that match is, and
    how many other earlier occurrences agree with the context about as long (RIVAL_SHARE), the
    tokens stopping where one goes on otherwise: 0 where one earlier call alone wrote them."""

    tokens: list[int]
    length: int
    witnesses: int = 0


class DraftMemory:
    """Earlier token sequences, indexed by their n-grams. A match measures the newest `places`
    occurrences of the context's last n-gram and takes the one whose earlier tokens agree with
    the context's longest (the newest on a tie), as a suffix index takes the longest match."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, ngram: int = NGRAM, places: int = PLACES) -> None:
        assert max_tokens >= 1, "options.check_draft_cache_size checks the bound"
        self.max_tokens = max_tokens
        self.sequences: deque[list[int]] = deque()
        self._first = 0  # the number of sequences evicted: sequence i lives at self.sequences[i - _first]
        self._size = 0
        self._table = NgramTable(range(1, ngram + 1), places)  # n-gram -> its newest (sequence number, end)
        self.earned: dict[str, Earned] = {}  # by proposer name: what its drafts earned in earlier calls
        self._lock = threading.Lock()  # a server's handlers may read it while its loop adds

    def __len__(self) -> int:
        return self._size

    def add(self, tokens: Sequence[int]) -> None:
        """Remember a finished sequence (its tail only, if it alone exceeds the bound)."""
        tokens = [int(t) for t in tokens[-self.max_tokens :]]
        with self._lock:
            self._add(tokens)

    def _add(self, tokens: list[int]) -> None:
        if not tokens or (self.sequences and self.sequences[-1] == tokens):
            return
        number = self._first + len(self.sequences)
        self.sequences.append(tokens)
        self._size += len(tokens)
        self._table.add(tokens, range(1, len(tokens)), number)  # not the sequence's own end: nothing follows it
        if self._size > self.max_tokens:
            while self._size > self.max_tokens:
                self._size -= len(self.sequences.popleft())
                self._first += 1
            self._table.keep(lambda number: number >= self._first)

    def match(self, context: Sequence[int]) -> Recall | None:
        """The continuation of the longest n-gram of the context's end seen in memory (longest n
        first), from the occurrence that agrees with the context furthest back, as far as no rival
        occurrence contradicts it (see RIVAL_SHARE; the tokens may then be none), with those rivals
        counted as its witnesses."""
        with self._lock:
            found = self._table.occurrences(context, self._sequence)
            if not found:
                return None
            length, number, end = longest(found)
            tokens = self._sequence(number)[end : end + RECALL_TOKENS]
            rivals = [self._sequence(n)[e : e + len(tokens)] for m, n, e in found if (n, e) != (number, end) and m >= RIVAL_SHARE * length]
            return Recall(tokens=tokens[: uncontested(tokens, rivals)], length=length, witnesses=len(rivals))

    def _sequence(self, number: int) -> list[int]:
        return self.sequences[number - self._first]

    # -- the cache file ---------------------------------------------------------------------

    def to_json(self, fingerprint: str) -> dict:
        earned = {name: earned_json(e) for name, e in sorted(self.earned.items())}
        return {"format": FORMAT, "version": VERSION, "tokenizer": fingerprint, "sequences": list(self.sequences), "earned": earned}

    @classmethod
    def from_json(cls, data, fingerprint: str, n_vocab: int, max_tokens: int, name: str) -> "DraftMemory":
        """The memory a parsed file holds, or BadCache saying why it is not trusted."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BadCache(f"draft cache {name} is not a specdec draft cache")
        if data.get("version") != VERSION:
            raise BadCache(f"draft cache {name} has format version {data.get('version')!r}, this specdec reads {VERSION}")
        if data.get("tokenizer") != fingerprint:
            raise BadCache(f"draft cache {name} was written for another tokenizer")
        sequences = data.get("sequences")
        if not isinstance(sequences, list) or not all(isinstance(s, list) for s in sequences):
            raise BadCache(f"draft cache {name} holds no list of token sequences")
        total = sum(len(s) for s in sequences)
        if total > max_tokens:
            raise BadCache(f"draft cache {name} holds {total} tokens, over --draft-cache-size {max_tokens}")
        if not all(type(t) is int and 0 <= t < n_vocab for s in sequences for t in s):
            raise BadCache(f"draft cache {name} holds token ids outside the vocabulary of {n_vocab}")
        memory = cls(max_tokens)
        for seq in sequences:
            memory.add(seq)
        memory.earned = recalled(read_earned(data.get("earned"), f"draft cache {name}"))  # a file of an earlier release may hold others
        return memory


def earned_json(e: Earned) -> dict:
    """One proposer's record as a file keeps it (`read_earned` reads it back). Example:
    Earned((0.9,), (1.9,), 0.4) -> {"hits": [0.9], "trials": [1.9], "draft_cost": 0.4}."""
    record = {"hits": [round(h, 4) for h in e.hits], "trials": [round(x, 4) for x in e.trials]}
    if e.draft_cost is not None:
        record["draft_cost"] = round(e.draft_cost, 4)
    return record


def recalled(earned: Mapping[str, Earned]) -> dict[str, Earned]:
    """The records the memory keeps from call to call: the draft model's ("model"), those of
    lookup's proposals, in the call's own context and in the memory ("lookup:2",
    "lookup:memory:6+"), and of the cascade's guesses from the memory ("cascade:memory:3-5");
    lookup.py and cascade.py name them. Not the cascade's other rounds ("cascade:2": the draft
    model's sample after a guess, whose record is not the model's own). Read from a copy taken at
    once: another sequence of the same tenant may add to the memory's record meanwhile (a server's
    slots), and iterating the live dict then raised "dictionary changed size during iteration"."""
    snapshot = dict(earned)  # one C-level copy, which no other thread interleaves with
    return {name: record for name, record in snapshot.items() if name == "model" or name.startswith("lookup:") or name.split(":")[1:2] == ["memory"]}


def resumed(earned: Mapping[str, Earned], drafter: str) -> dict[str, Earned]:
    """What a call drafted by `drafter` ("model+lookup", "cascade") starts its policy from: the
    records the memory keeps (`recalled`), less the draft model's for the cascade. Its guessed
    rounds, which draft most of its tokens, start each call from their priors (their records
    are not kept), and those priors hold only beside the model's own: logged on the built-in
    pair's `edit` at T = 0.8 (eight repeats), with the model's record carried the guessed rounds
    made 43.3 tok/s against 45.1 without the memory (the memory 0.96x in all), without it 44.7
    against 45.3 (0.99x). The record stays in the memory, for calls by the other drafters.
    Example: {"model": a, "cascade:memory:3-5": b} -> "model+lookup": both; "cascade": the second."""
    return {name: record for name, record in recalled(earned).items() if not (drafter == "cascade" and name == "model")}


def read_earned(data, name: str) -> dict[str, Earned]:
    """A file's earned record (`name`: the file, as messages say it: "draft cache FILE") ({proposer: {"hits": [..], "trials": [..], "draft_cost": x}}), or
    BadCache saying what is wrong with it: counts must be finite, 0 <= hits <= trials, at most
    MAX_DRAFT_TOKENS positions; a draft cost, where there is one, a number as counts are.
    Example: {"model": {"hits": [0.9], "trials": [1.9], "draft_cost": 0.4}} -> {"model": Earned((0.9,), (1.9,), 0.4)}."""
    if not isinstance(data, dict) or len(data) > MAX_EARNED:
        raise BadCache(f"{name} holds no record of what each drafter earned (or too large a one)")
    out = {}
    for source, entry in data.items():
        hits, trials, cost = (entry.get(key) if isinstance(entry, dict) else None for key in ("hits", "trials", "draft_cost"))
        counts = isinstance(hits, list) and isinstance(trials, list) and len(hits) == len(trials) <= MAX_DRAFT_TOKENS
        counts = counts and all(_count(h) and _count(x) and h <= x for h, x in zip(hits, trials)) and (cost is None or _count(cost))
        if not counts or len(source) > 64:
            raise BadCache(f"{name} holds a malformed record for drafter {source[:64]!r}")
        out[source] = Earned(tuple(float(h) for h in hits), tuple(float(x) for x in trials), None if cost is None else float(cost))
    return out


def _count(x) -> bool:
    """A number a record may hold: finite, 0 <= x < 1e6 (a decayed count stays below ten per position)."""
    return type(x) in (int, float) and 0.0 <= x < 1e6


def read_cache(path: Path, fingerprint: str, n_vocab: int, max_tokens: int) -> DraftMemory:
    """The memory in `path` (empty if there is none); BadCache if it cannot be trusted."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return DraftMemory(max_tokens)
    except OSError as exc:
        raise BadCache(f"draft cache {path} cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    if len(raw) > 64 * max_tokens + EARNED_BYTES + 4096:  # far above the JSON of max_tokens ids: never parse a huge file
        raise BadCache(f"draft cache {path} is {len(raw)} bytes, too large for --draft-cache-size {max_tokens}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadCache(f"draft cache {path} is not valid JSON (truncated?)") from None
    return DraftMemory.from_json(data, fingerprint, n_vocab, max_tokens, str(path))


def save_cache(
    path: Path, new: Sequence[Sequence[int]], fingerprint: str, n_vocab: int, max_tokens: int, earned: Mapping[str, Earned] = {}
) -> str | None:
    """Add `new` sequences to the file's memory (as it is now: another process may have saved),
    with `earned`'s records in place of the file's for the same proposers, and replace the file
    atomically. Returns the one line to show if the file on disk was not trusted and is rebuilt
    from `new` and `earned` alone, else None."""
    path = Path(path)
    with locked(path):
        note = None
        try:
            memory = read_cache(path, fingerprint, n_vocab, max_tokens)
        except BadCache as exc:
            memory, note = DraftMemory(max_tokens), f"{exc}; rebuilding it"
        for seq in new:
            memory.add(seq)
        memory.earned.update(recalled(earned))
        replace_atomically(path, json.dumps(memory.to_json(fingerprint), separators=(",", ":")))
    return note
