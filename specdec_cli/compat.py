"""Can this draft speak for this target? llama.cpp's vocabulary rule, and the shared tokens, as a report.

llama.cpp (common/speculative.cpp, `common_speculative_are_compatible`) accepts a
draft/target pair when the vocabularies have the same type, the same add-BOS and add-EOS
flags, the same BOS id when BOS is added and the same EOS id when EOS is added, sizes that
differ by at most 128, and identical token text for every id from 5 up to the smaller
size. This module applies the same rule, explains a failure by naming the first token
that differs, and counts how many token texts agree.

    report = compare_vocabularies(draft.vocab, target.vocab, draft.token_text, target.token_text)
    report.compatible, report.problems   # False, ["token 5 differs: draft '<file_sep>', target '[multimodal]'"]
    report = check_files(Path("draft.gguf"), Path("target.gguf"))   # loads vocabularies only

When the sizes differ within the margin (Qwen2.5 pads its vocabularies differently per
size), the engine works over the shared ids only: `report.shared_vocab` is the limit below
which drafts and outputs stay.

A pair is one of three `relation`s: "same" (the rule accepts it, equal sizes), "padded" (the
rule accepts it, sizes differ) or "different" (the rule refuses it). For a different pair
`check_files` also counts the tokens both vocabularies share (drafting/vocab_map.py: the ones
cross-vocabulary drafting proposes from; usable from MIN_SHARED_TOKENS on) and measures
their `Coverage` on the target: over a 32-token greedy continuation of each of the first
three built-in bench prompts (raw text), the mean probability the target's softmax at
temperature 1 puts on shared tokens, and how often its greedy token is a shared one. Both
bound acceptance from above: a token the draft cannot propose is never accepted.
Example: shared 46,145 tokens, mass 0.93, greedy 0.95 -> at most 93% of drafts accepted at
T = 1, at most 95% at T = 0.

Left out: drafting (drafting/cross_vocab.py), printing (cli/models.py). Weights are loaded only to
measure the coverage of a different pair (the target's, with a 1024-token context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .llama.vocab import VocabInfo

MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID
# Fewer shared tokens than this and a pair the rule refuses is refused for cross-vocabulary
# drafting too: two byte-level vocabularies share at least their 256 single bytes, so a pair
# below it shares little beyond single characters (every draft would be one short piece).
MIN_SHARED_TOKENS = 256


@dataclass
class PairReport:
    draft: VocabInfo
    target: VocabInfo
    problems: list[str] = field(default_factory=list)  # each one makes llama.cpp refuse the pair
    notes: list[str] = field(default_factory=list)  # differences llama.cpp tolerates
    first_differing_token: int | None = None
    first_difference: tuple[str, str] | None = None  # (draft text, target text) of that token
    checked: int = 0  # ids compared: FIRST_CHECKED_TOKEN .. shared_vocab - 1
    identical: int = 0  # of which with the same text
    shared_tokens: int | None = None  # different vocabularies: how many tokens both share (vocab_map)
    coverage: "Coverage | None" = None  # different vocabularies: how much of the target's output they cover

    @property
    def relation(self) -> str:
        """"same", "padded" or "different" (see the module docstring)."""
        if self.problems:
            return "different"
        return "padded" if self.size_difference else "same"

    @property
    def usable(self) -> bool:
        """Whether specdec drafts for this pair: llama.cpp's rule accepts it, or enough tokens are shared."""
        return self.compatible or (self.shared_tokens or 0) >= MIN_SHARED_TOKENS

    @property
    def compatible(self) -> bool:
        return not self.problems

    @property
    def shared_vocab(self) -> int:
        return min(self.draft.n_vocab, self.target.n_vocab)

    @property
    def size_difference(self) -> int:
        return self.target.n_vocab - self.draft.n_vocab

    @property
    def identical_share(self) -> float:
        """Share of the compared ids whose texts match (1.0 when there is nothing to compare)."""
        return self.identical / self.checked if self.checked else 1.0

    def to_dict(self) -> dict:
        side = lambda v: {  # noqa: E731
            "n_vocab": v.n_vocab, "vocab_type": v.vocab_type, "bos": v.bos, "eos": v.eos,
            "add_bos": v.add_bos, "add_eos": v.add_eos,
        }
        return {
            "compatible": self.compatible,
            "relation": self.relation,
            "usable": self.usable,
            "shared_tokens": self.shared_tokens,
            "coverage": None if self.coverage is None else self.coverage.to_dict(),
            "draft": side(self.draft),
            "target": side(self.target),
            "size_difference": self.size_difference,
            "shared_vocab": self.shared_vocab,
            "first_differing_token": self.first_differing_token,
            "first_difference": list(self.first_difference) if self.first_difference else None,
            "identical_share": self.identical_share,
            "checked": self.checked,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def compare_vocabularies(
    draft: VocabInfo,
    target: VocabInfo,
    draft_text: Callable[[int], str],
    target_text: Callable[[int], str],
) -> PairReport:
    report = PairReport(draft=draft, target=target)
    if draft.vocab_type != target.vocab_type:
        report.problems.append(f"vocabulary types differ: draft {draft.vocab_type}, target {target.vocab_type}")
    for flag, token in (("add_bos", "bos"), ("add_eos", "eos")):
        label = flag.upper().replace("_", "-")
        if getattr(draft, flag) != getattr(target, flag):
            report.problems.append(f"{label} differs: draft {getattr(draft, flag)}, target {getattr(target, flag)}")
        a, b = getattr(draft, token), getattr(target, token)
        if a != b:
            message = f"{token.upper()} id differs: draft {a}, target {b}"
            # llama.cpp compares the id only when the token is added to every prompt
            (report.problems if getattr(target, flag) else report.notes).append(message)
    diff = abs(draft.n_vocab - target.n_vocab)
    if diff > MAX_SIZE_DIFFERENCE:
        report.problems.append(
            f"vocabulary sizes differ by {diff} (draft {draft.n_vocab}, target {target.n_vocab}); "
            f"llama.cpp allows at most {MAX_SIZE_DIFFERENCE}"
        )
    elif diff:
        report.notes.append(
            f"vocabulary sizes differ by {diff} (draft {draft.n_vocab}, target {target.n_vocab}): "
            f"padding; drafts and outputs stay below id {report.shared_vocab}"
        )
    for i in range(FIRST_CHECKED_TOKEN, report.shared_vocab):
        a, b = draft_text(i), target_text(i)
        report.checked += 1
        if a == b:
            report.identical += 1
        elif report.first_differing_token is None:
            report.first_differing_token = i
            report.first_difference = (a, b)
            report.problems.append(f"token {i} differs: draft {a!r}, target {b!r}")
    return report


@dataclass(frozen=True)
class Coverage:
    """How much of a target's output the shared tokens cover (upper bounds on acceptance)."""

    positions: int  # target positions measured
    mass: float  # mean probability of the shared tokens under the target's softmax at temperature 1
    greedy: float  # share of positions whose greedy (argmax) token is shared

    def to_dict(self) -> dict:
        return {"positions": self.positions, "mass": self.mass, "greedy": self.greedy}


def measure_coverage(target, shared: np.ndarray, prompts: list[list[int]], n_tokens: int = 32) -> Coverage:
    """Decode each prompt and a greedy continuation of n_tokens with `target`; at each
    continuation position read the softmax mass on the `shared` ids and whether the argmax is one.
    The target's cache is cleared before each prompt and after the last."""
    is_shared = np.zeros(target.n_vocab, dtype=bool)
    is_shared[shared] = True
    masses: list[float] = []
    hits = 0
    try:
        for ids in prompts:
            target.rewind(0)
            logits = target.decode(ids, 1)
            for _ in range(n_tokens):
                row = logits[0].astype(np.float64)
                w = np.exp(row - row.max())
                masses.append(float(w[is_shared].sum() / w.sum()))
                best = int(np.argmax(row))
                hits += bool(is_shared[best])
                if target.is_end_of_generation(best) or len(target.tokens) >= target.n_ctx:
                    break
                logits = target.decode([best], 1)
    finally:
        target.rewind(0)
    n = len(masses)
    return Coverage(n, float(np.mean(masses)) if n else 0.0, hits / n if n else 0.0)


def check_files(draft_path: Path, target_path: Path, coverage: bool = True) -> PairReport:
    """Compare two GGUF files' vocabularies; for different ones count the shared tokens and,
    with `coverage`, measure their coverage (which loads the target's weights and runs it)."""
    from .drafting.vocab_map import of_models
    from .llama.model import LlamaModel
    from .prompts import builtin_prompts

    with LlamaModel(draft_path, vocab_only=True) as draft, LlamaModel(target_path, vocab_only=True) as target:
        report = compare_vocabularies(draft.vocab, target.vocab, draft.token_text, target.token_text)
        if report.compatible:
            return report
        shared = of_models(draft, target)
    report.shared_tokens = shared.size
    if report.usable and coverage:
        with LlamaModel(target_path, n_ctx=1024) as model:
            prompts = [model.tokenize(p.text, add_special=True, parse_special=False) for p in builtin_prompts()[:3]]
            report.coverage = measure_coverage(model, shared.shared_target, prompts)
    return report


def report_lines(report: PairReport, draft_name: str, target_name: str) -> list[str]:
    """The report as aligned text lines, ending with the verdict. Example line:
    'vocabulary type   bpe        spm        differs'
    """
    d, t = report.draft, report.target
    yes_no = lambda flag: "yes" if flag else "no"  # noqa: E731
    rows = [
        ("vocabulary type", d.vocab_type, t.vocab_type),
        ("tokens", str(d.n_vocab), str(t.n_vocab)),
        ("BOS id", str(d.bos), str(t.bos)),
        ("EOS id", str(d.eos), str(t.eos)),
        ("adds BOS", yes_no(d.add_bos), yes_no(t.add_bos)),
        ("adds EOS", yes_no(d.add_eos), yes_no(t.add_eos)),
    ]
    width = 12
    lines = [f"draft   {draft_name}", f"target  {target_name}", "", f"{'':18}{'draft':<{width}}  target"]
    for label, a, b in rows:
        mark = "" if a == b else "differs"
        lines.append(f"{label:<18}{a:<{width}}  {b:<{width}}  {mark}".rstrip())
    diff = report.size_difference
    lines.append(f"size difference   {diff:+d} (llama.cpp allows {MAX_SIZE_DIFFERENCE} either way)")
    lines.append(f"vocabularies      {report.relation}")
    if report.first_differing_token is None:
        lines.append(f"first differing token: none among ids {FIRST_CHECKED_TOKEN}..{report.shared_vocab - 1}")
    else:
        a, b = report.first_difference
        lines.append(f"first differing token: id {report.first_differing_token}: draft {a!r}, target {b!r}")
    lines.append(
        f"identical token texts: {report.identical} of {report.checked} ids checked ({100 * report.identical_share:.1f}%)"
    )
    if report.shared_tokens is not None:
        lines.append(
            f"shared tokens: {report.shared_tokens:,} (same bytes, one id each side): "
            f"{_share(report.shared_tokens, d.n_vocab)} of the draft's, {_share(report.shared_tokens, t.n_vocab)} of the target's"
        )
    if report.coverage is not None:
        c = report.coverage
        lines.append(
            f"target output on shared tokens: {100 * c.mass:.1f}% of the probability (T = 1), "
            f"{100 * c.greedy:.1f}% of greedy tokens, over {c.positions} positions of 3 sample prompts"
        )
        lines.append("  (upper bounds on the share of drafts the target can accept)")
    lines.append("")
    if report.compatible:
        lines.append(
            f"verdict: COMPATIBLE: llama.cpp's rule accepts this pair; specdec drafts and emits ids below {report.shared_vocab}"
        )
        lines += [f"  note: {n}" for n in report.notes]
    elif report.usable:
        lines.append(
            f"verdict: CROSS-VOCABULARY: llama.cpp's rule refuses this pair; specdec drafts over the "
            f"{report.shared_tokens:,} shared tokens (exact at every temperature). llama.cpp's reasons:"
        )
        lines += [f"  - {p}" for p in report.problems]
        lines += [f"  note: {n}" for n in report.notes]
    else:
        shared = "" if report.shared_tokens is None else f" and they share only {report.shared_tokens} tokens (cross-vocabulary drafting needs {MIN_SHARED_TOKENS})"
        lines.append(f"verdict: INCOMPATIBLE: {len(report.problems)} reason(s) llama.cpp would refuse this pair{shared}:")
        lines += [f"  - {p}" for p in report.problems]
        lines += [f"  note: {n}" for n in report.notes]
    return lines


def _share(part: int, whole: int) -> str:
    """A share as a percentage with one decimal. Example: (1, 8) -> '12.5%'."""
    return f"{100 * part / whole:.1f}%" if whole else "n/a"
