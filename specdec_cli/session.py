"""From two resolved files to ready engines: load both models, check the pair, build engines.

    with open_pair(draft_path, target_path, LoadOptions(n_ctx=4096)) as pair:
        prompt_ids = pair.prompt_tokens("Hello", chat=True)
        for event in pair.engine().generate(prompt_ids, config, draft_policy(8)): ...

`pair.engine(speculative=False)` gives the target-only engine on the same loaded target,
which is what `--baseline` and `bench` compare against. `pair.engine(drafter="lookup")`
drafts by prompt lookup (no draft model needed: open the pair with draft_path=None);
"model+lookup" uses lookup when it matches and the draft model otherwise.

Left out: option parsing (cli_options.py), printing (render.py), the loop itself
(engine.py), the draft-length policy (the caller builds it: policy.draft_policy).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .backend import LlamaModel
from .cli_options import DRAFTERS
from .compat import compare_vocabularies
from .drafters import LookupDrafter, LookupOptions, ModelAndLookup, ModelDrafter
from .engine import Engine
from .errors import BadInput, IncompatiblePair


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 2048
    draft_ctx: int | None = None  # None: the same as the target's
    n_threads: int | None = None
    gpu_layers: int | None = None  # None: all layers on the GPU when there is one
    draft_gpu_layers: int | None = None
    repack: bool | None = None  # None: auto (off where llama.cpp reports AMX, on elsewhere)


@dataclass
class LoadedPair:
    target: LlamaModel
    draft: LlamaModel | None
    vocab_limit: int

    def prompt_tokens(self, prompt: str, *, chat: bool = True, system: str | None = None) -> list[int]:
        """Tokenize with the target's chat template (a user turn), or the text as it is (--raw)."""
        if chat:
            messages = ([("system", system)] if system else []) + [("user", prompt)]
            text = self.target.apply_chat_template(messages)
        else:
            text = (system + "\n\n" + prompt) if system else prompt
        ids = self.target.tokenize(text, add_special=True, parse_special=True)
        if not ids:
            raise BadInput("the prompt is empty after tokenization; give some text")
        return ids

    def engine(self, speculative: bool = True, drafter: str = "model", lookup: LookupOptions = LookupOptions()) -> Engine:
        """The engine for `drafter` ("model", "lookup" or "model+lookup"); target-only if not speculative."""
        if drafter not in DRAFTERS:
            raise BadInput(f"unknown drafter {drafter!r}; choose one of {', '.join(DRAFTERS)}")
        if not speculative or (drafter == "model" and self.draft is None):
            return Engine(self.target, None, vocab_limit=self.vocab_limit)
        if drafter == "model+lookup" and self.draft is None:
            raise BadInput("--drafter model+lookup needs a draft model; pass --draft, or use --drafter lookup")
        by_lookup = LookupDrafter(lookup, vocab_limit=self.vocab_limit, is_end=self.target.is_end_of_generation)
        if drafter == "lookup":
            return Engine(self.target, by_lookup, vocab_limit=self.vocab_limit)
        by_model = ModelDrafter(self.draft, self.vocab_limit)
        chosen = by_model if drafter == "model" else ModelAndLookup(by_model, by_lookup)
        return Engine(self.target, chosen, vocab_limit=self.vocab_limit)


def check_pair(draft: LlamaModel, target: LlamaModel) -> int:
    """Raise IncompatiblePair unless llama.cpp's rule accepts the pair; return the shared vocabulary size."""
    report = compare_vocabularies(draft.vocab, target.vocab, draft.token_text, target.token_text)
    if not report.compatible:
        # The first problem, and the first differing token whenever there is one (it is the
        # most concrete evidence that the two tokenizers disagree).
        shown = report.problems[:1] + [p for p in report.problems[1:] if p.startswith("token ")][:1]
        more = len(report.problems) - len(shown)
        raise IncompatiblePair(
            f"{draft.path.name} cannot draft for {target.path.name}: {'; '.join(shown)}"
            + (f" (and {more} more problems)" if more else "")
        )
    return report.shared_vocab


@contextlib.contextmanager
def open_pair(
    draft_path: Path | None,
    target_path: Path,
    options: LoadOptions = LoadOptions(),
    on_load: Callable[[str, Path], None] | None = None,
) -> Iterator[LoadedPair]:
    """Load target (and draft, if given), check them, and close both on exit."""
    draft_ctx = options.draft_ctx or options.n_ctx
    if draft_ctx < options.n_ctx:
        raise BadInput(
            f"the draft context ({draft_ctx} tokens) is smaller than the target's ({options.n_ctx}); "
            f"pass --draft-ctx {options.n_ctx} or more"
        )
    with contextlib.ExitStack() as stack:
        if on_load:
            on_load("target", target_path)
        target = stack.enter_context(
            LlamaModel(
                target_path, n_ctx=options.n_ctx, n_threads=options.n_threads, n_gpu_layers=options.gpu_layers,
                repack=options.repack, role="target",
            )  # fmt: skip
        )
        draft = None
        vocab_limit = target.n_vocab
        if draft_path is not None:
            if on_load:
                on_load("draft", draft_path)
            draft = stack.enter_context(
                LlamaModel(
                    draft_path, n_ctx=draft_ctx, n_threads=options.n_threads, n_gpu_layers=options.draft_gpu_layers,
                    repack=options.repack, role="draft",
                )  # fmt: skip
            )
            vocab_limit = check_pair(draft, target)
        yield LoadedPair(target=target, draft=draft, vocab_limit=vocab_limit)
