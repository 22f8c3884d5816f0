"""From two resolved files to ready engines: load both models, check the pair, build engines.

    with open_pair(draft_path, target_path, LoadOptions(n_ctx=4096)) as pair:
        prompt_ids = pair.prompt_tokens("Hello", chat=True)
        for event in pair.engine().generate(prompt_ids, config, draft_policy(8)): ...

`pair.engine(speculative=False)` gives the target-only engine on the same loaded target,
which is what `--baseline` and `bench` compare against. `pair.engine(drafter="lookup")`
drafts by prompt lookup (no draft model needed: open the pair with draft_path=None);
"model+lookup" uses lookup when it matches and the draft model otherwise.

When llama.cpp's vocabulary rule refuses the pair but the vocabularies share at least
MIN_SHARED_TOKENS tokens (by decoded bytes, drafting/vocab_map.py), the draft drafts over the shared
tokens (cross_vocab.CrossVocabDrafter) and the specdec logger says so once on stderr:
"vocabularies differ: drafting over the 31,622 shared tokens". Lookup drafting works in
target ids either way.

Left out: option parsing (cli/options.py), printing (cli/render.py), the loop itself
(decoding/engine.py), the draft-length policy (the caller builds it: policy.draft_policy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, MutableMapping, Sequence

from .causal_model import common_prefix
from .compat import MIN_SHARED_TOKENS, compare_vocabularies
from .decoding.batch import Batcher
from .decoding.engine import Engine
from .drafting.cascade import CascadeDrafter
from .drafting.combined import ModelAndLookup
from .drafting.cross_vocab import CrossVocabDrafter
from .drafting.lookup import LookupDrafter, LookupOptions
from .drafting.memory import DraftMemory
from .drafting.model import ModelDrafter
from .drafting.vocab_map import VocabMap, of_models
from .errors import BadInput, IncompatiblePair
from .events import Earned
from .llama.gguf import require_chat_template
from .llama.model import LlamaModel
from .llama.rpc import first_pass_prior, parse_endpoints
from .options import DRAFTERS, context_size, gpu_layers_to_load

log = logging.getLogger("specdec")


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 2048
    draft_ctx: int | None = None  # None: the same as the target's
    n_threads: int | None = None
    gpu_layers: int | None = None  # None: all layers on the GPU when there is one
    draft_gpu_layers: int | None = None
    repack: bool | None = None  # None: auto (off where llama.cpp reports AMX, on elsewhere)
    chat: bool = False  # prompts go through the target's chat template: a target without one is refused before loading
    rpc: tuple[str, ...] = ()  # the target's layers on these RPC servers (llama/rpc.py)
    slots: int = 1  # sequences each model's context holds (serve --slots; each of n_ctx tokens)
    draft_rpc: tuple[str, ...] = ()

    @classmethod
    def from_cli(
        cls, ctx: int | None, draft_ctx: int | None, threads: int | None, gpu_layers: int, draft_gpu_layers: int,
        repack: bool | None, pair_name: str | None, *, chat: bool = False, rpc: str | None = None, draft_rpc: str | None = None,
    ) -> "LoadOptions":  # fmt: skip
        """The options run, bench, audit and serve load with: --ctx or the named pair's context
        (options.context_size), GPU layers as options.gpu_layers_to_load allows (a side on RPC
        servers takes all its layers there unless told otherwise), `chat` unless --raw."""
        rpc_servers = parse_endpoints(rpc) if rpc else ()
        draft_rpc_servers = parse_endpoints(draft_rpc, "--draft-rpc") if draft_rpc else ()
        # A side on RPC servers keeps its count (-1: all its layers there); a local side needs a GPU here.
        local, draft_local = gpu_layers_to_load(0 if rpc_servers else gpu_layers, 0 if draft_rpc_servers else draft_gpu_layers)
        gpu_layers = gpu_layers if rpc_servers else local
        draft_gpu_layers = draft_gpu_layers if draft_rpc_servers else draft_local
        return cls(
            n_ctx=context_size(ctx, pair_name), draft_ctx=draft_ctx, n_threads=threads,
            gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers, repack=repack, chat=chat,
            rpc=rpc_servers, draft_rpc=draft_rpc_servers,
        )  # fmt: skip


@dataclass
class LoadedPair:
    target: LlamaModel
    draft: LlamaModel | None
    vocab_limit: int
    vocab_map: VocabMap | None = None  # set when the vocabularies differ: drafting over the shared tokens

    def prompt_tokens(self, prompt: str, *, chat: bool = True, system: str | None = None) -> list[int]:
        """Tokenize with the target's chat template (a user turn), or the text as it is (--raw)."""
        if chat:
            return self.chat_tokens(([("system", system)] if system else []) + [("user", prompt)])
        return self._tokens((system + "\n\n" + prompt) if system else prompt)

    def chat_tokens(self, turns: Sequence, tools: list[dict] | None = None) -> list[int]:
        """A conversation through the target's chat template, ready for the assistant's turn: (role,
        text) turns, or Hugging Face's message dicts (tool calls, tool results) with the `tools` the
        template shows the model."""
        return self._tokens(self.target.apply_chat_template(turns, tools=tools))

    def _tokens(self, text: str) -> list[int]:
        ids = self.target.tokenize(text, add_special=True, parse_special=True)
        if not ids:
            raise BadInput("the prompt is empty after tokenization; give some text")
        return ids

    def tokenizer_fingerprint(self) -> str:
        """What a draft cache file must have been written with: a hash of the target's token pieces."""
        digest = hashlib.sha256(str(self.target.n_vocab).encode())
        for token in range(self.target.n_vocab):
            piece = self.target.piece(token)
            digest.update(len(piece).to_bytes(4, "little") + piece)
        return digest.hexdigest()[:32]

    def draft_context(self, context: Sequence[int]) -> list[int]:
        """The draft's tokens for a target context: the same ids, or the same text in the draft's
        tokens when the vocabularies differ (what cost_curve.measure_cost_curve times the draft on)."""
        if self.vocab_map is None:
            return list(context)
        return CrossVocabDrafter.for_models(self.draft, self.target, self.vocab_map).own_context(context)

    def draft_lag(self) -> int:
        """Tokens of the target's cache that the draft model has not evaluated: what its next
        catch-up evaluates besides a round's last token. 0 without a draft model, and across
        vocabularies (not counted there: the server then drafts as the switch says). Example:
        target cache [1, 2, 3, 4], draft cache [1, 2] -> 2; draft cache [1, 5] -> 3."""
        if self.draft is None or self.vocab_map is not None:
            return 0
        return len(self.target.tokens) - common_prefix(self.draft.tokens, self.target.tokens)

    def shared(self, slots: int) -> tuple[Batcher, list["LoadedPair"]]:
        """`slots` pairs of sequence views over this pair's models (loaded with LoadOptions.slots or
        more), whose engines run together through one Batcher (decoding/batch.py). Example:
        batcher, pairs = pair.shared(4); pairs[2].engine() generates in sequence 2 of both models."""
        models = [m for m in (self.draft, self.target) if m is not None]  # the draft's steps go first
        batcher = Batcher(models, names=["draft", "target"][2 - len(models) :])

        def view(model, i):
            return None if model is None else batcher.sequence(model, i)

        return batcher, [dataclasses.replace(self, target=view(self.target, i), draft=view(self.draft, i)) for i in range(slots)]

    def engine(
        self, speculative: bool = True, drafter: str = "model", lookup: LookupOptions = LookupOptions(), memory: DraftMemory | None = None,
        earned: MutableMapping[str, Earned] | None = None,
    ) -> Engine:  # fmt: skip
        """The engine for `drafter` ("model", "lookup", "model+lookup", "cascade"); target-only if not
        speculative or "none" (speculation off: the server's comparison, serve --drafter none).
        Lookup also drafts from `memory`, earlier calls' sequences (drafting/memory.py), when given,
        and the policy starts from what the proposals earned in those calls (memory.earned; else
        `earned`, `-k auto`'s record of this pair on this machine: tuning/record.py), and writes
        back what it learnt."""
        if drafter not in DRAFTERS:
            raise BadInput(f"unknown drafter {drafter!r}; choose one of {', '.join(DRAFTERS)}")
        if not speculative or drafter == "none" or (drafter == "model" and self.draft is None):
            return Engine(self.target, None, vocab_limit=self.vocab_limit)
        if drafter in ("model+lookup", "cascade") and self.draft is None:
            raise BadInput(f"--drafter {drafter} needs a draft model; pass --draft, or use --drafter lookup")
        by_lookup = LookupDrafter(lookup, vocab_limit=self.vocab_limit, is_end=self.target.is_end_of_generation, memory=memory)
        earned = memory.earned if memory is not None else earned
        if drafter == "lookup":
            return Engine(self.target, by_lookup, vocab_limit=self.vocab_limit, earned=earned)
        if self.vocab_map is not None:
            by_model = CrossVocabDrafter.for_models(self.draft, self.target, self.vocab_map)
        else:
            by_model = ModelDrafter(self.draft, self.vocab_limit, is_end=self.target.is_end_of_generation)
        if drafter == "cascade" and self.vocab_map is None:
            return Engine(self.target, CascadeDrafter(by_model, by_lookup), vocab_limit=self.vocab_limit, earned=earned)
        chosen = by_model if drafter in ("model", "cascade") else ModelAndLookup(by_model, by_lookup)  # cascade: not across vocabularies
        return Engine(self.target, chosen, vocab_limit=self.vocab_limit, earned=earned)

    def first_pass_prior(self) -> float | None:
        """What a target pass at a batch size not run yet costs more, before one is timed: over RPC
        some round trips (llama/rpc.first_pass_prior), None for a local target."""
        return first_pass_prior(self.target.rpc_probed)

    def baseline_engine(self) -> Engine:
        """A target-only engine on a second context of the target's weights (LlamaModel.sibling,
        its own KV cache), to decode in turns with this pair's own engine (decoding/in_turns.py:
        `run --baseline`); close its target when done, before the pair."""
        return Engine(self.target.sibling(), None, vocab_limit=self.vocab_limit)


def check_pair(draft: LlamaModel, target: LlamaModel) -> int:
    """The ids below which drafts and outputs stay (see `pair_vocabularies`); IncompatiblePair for an unusable pair."""
    return pair_vocabularies(draft, target)[0]


def pair_vocabularies(draft: LlamaModel, target: LlamaModel) -> tuple[int, VocabMap | None]:
    """(the ids below which drafts and outputs stay, None) when llama.cpp's rule accepts the pair;
    (the target's vocabulary size, the shared tokens) when it does not but enough tokens are
    shared; IncompatiblePair otherwise."""
    report = compare_vocabularies(draft.vocab, target.vocab, draft.token_text, target.token_text)
    if report.compatible:
        return report.shared_vocab, None
    shared = of_models(draft, target)
    if shared.size >= MIN_SHARED_TOKENS:
        log.warning("vocabularies differ: drafting over the %s shared tokens", f"{shared.size:,}")
        return target.n_vocab, shared
    # The first problem, and the first differing token whenever there is one (it is the
    # most concrete evidence that the two tokenizers disagree).
    shown = report.problems[:1] + [p for p in report.problems[1:] if p.startswith("token ")][:1]
    more = len(report.problems) - len(shown)
    raise IncompatiblePair(
        f"{draft.path.name} cannot draft for {target.path.name}: {'; '.join(shown)}"
        + (f" (and {more} more problems)" if more else "")
        + f"; they share only {shared.size} tokens (cross-vocabulary drafting needs {MIN_SHARED_TOKENS})"
    )


@contextlib.contextmanager
def open_pair(
    draft_path: Path | None,
    target_path: Path,
    options: LoadOptions = LoadOptions(),
    on_load: Callable[[str, Path], None] | None = None,
) -> Iterator[LoadedPair]:
    """Load target (and draft, if given), check them, and close both on exit.

    With options.chat, a target whose header has no chat template is refused (BadInput)
    before either model loads.
    """
    draft_ctx = options.draft_ctx or options.n_ctx
    if draft_ctx < options.n_ctx:
        raise BadInput(
            f"the draft context ({draft_ctx} tokens) is smaller than the target's ({options.n_ctx}); "
            f"pass --draft-ctx {options.n_ctx} or more"
        )
    if options.chat:
        require_chat_template(target_path)
    with contextlib.ExitStack() as stack:
        if on_load:
            on_load("target", target_path)
        target = stack.enter_context(
            LlamaModel(
                target_path, n_ctx=options.n_ctx, n_threads=options.n_threads, n_gpu_layers=options.gpu_layers,
                repack=options.repack, role="target", rpc_servers=options.rpc, n_seq=options.slots,
            )  # fmt: skip
        )
        draft = None
        vocab_limit, vocab_map = target.n_vocab, None
        if draft_path is not None:
            if on_load:
                on_load("draft", draft_path)
            draft = stack.enter_context(
                LlamaModel(
                    draft_path, n_ctx=draft_ctx, n_threads=options.n_threads, n_gpu_layers=options.draft_gpu_layers,
                    repack=options.repack, role="draft", rpc_servers=options.draft_rpc, n_seq=options.slots,
                )  # fmt: skip
            )
            vocab_limit, vocab_map = pair_vocabularies(draft, target)
        yield LoadedPair(target=target, draft=draft, vocab_limit=vocab_limit, vocab_map=vocab_map)
