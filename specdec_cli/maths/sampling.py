"""The sampling settings, llama.cpp's defaults: a temperature and three filters.

The same settings process the target's row into p and the draft's into q (filters.py), so the
output follows the processed target distribution exactly. A filter at its neutral value is off.

    SamplingParams()                                # T = 0.8, top-k 40, top-p 0.95, min-p 0.05
    SamplingParams(temperature=0.0).greedy          # -> True (GREEDY): the first maximal logit
    SamplingParams(top_k=0, top_p=1.0, min_p=0.0)   # no filter: the whole vocabulary at T = 0.8

Left out: what the settings do to a row (filters.py), which values a user may give (options.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings; the defaults are llama.cpp's. top_k=0, top_p=1, min_p=0 switch a filter off."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = SamplingParams(temperature=0.0)
