"""Can this draft speak for this target? llama.cpp's vocabulary rule, as a report.

llama.cpp (common/speculative.cpp) accepts a draft/target pair when the vocabularies have
the same type, the same BOS/EOS ids and add-BOS/add-EOS flags, sizes that differ by at
most 128, and identical token text for every id from 5 up to the smaller size. This module
applies the same rule and explains a failure by naming the first token that differs.

    report = compare_vocabularies(draft_facts, target_facts)
    report.compatible, report.problems   # False, ["token 5 differs: draft '<s>' vs target 'a'"]

Left out: reading the facts from a file (backend.LlamaModel gives `vocab` and `token_text`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .backend import VocabInfo

MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID


@dataclass
class PairReport:
    draft: VocabInfo
    target: VocabInfo
    problems: list[str] = field(default_factory=list)
    first_differing_token: int | None = None
    identical_share: float = 0.0  # share of ids checked whose texts match

    @property
    def compatible(self) -> bool:
        return not self.problems

    @property
    def shared_vocab(self) -> int:
        return min(self.draft.n_vocab, self.target.n_vocab)


def compare_vocabularies(
    draft: VocabInfo,
    target: VocabInfo,
    draft_text: Callable[[int], str],
    target_text: Callable[[int], str],
) -> PairReport:
    report = PairReport(draft=draft, target=target)
    if draft.vocab_type != target.vocab_type:
        report.problems.append(f"vocabulary types differ: draft {draft.vocab_type}, target {target.vocab_type}")
    for name in ("bos", "eos", "add_bos", "add_eos"):
        a, b = getattr(draft, name), getattr(target, name)
        if a != b:
            report.problems.append(f"{name.upper().replace('_', '-')} differs: draft {a}, target {b}")
    diff = abs(draft.n_vocab - target.n_vocab)
    if diff > MAX_SIZE_DIFFERENCE:
        report.problems.append(
            f"vocabulary sizes differ by {diff} (draft {draft.n_vocab}, target {target.n_vocab}); "
            f"llama.cpp allows at most {MAX_SIZE_DIFFERENCE}"
        )
    checked = range(FIRST_CHECKED_TOKEN, report.shared_vocab)
    same = 0
    for i in checked:
        a, b = draft_text(i), target_text(i)
        if a == b:
            same += 1
        elif report.first_differing_token is None:
            report.first_differing_token = i
            report.problems.append(f"token {i} differs: draft {a!r}, target {b!r}")
    report.identical_share = same / len(checked) if len(checked) else 1.0
    return report
