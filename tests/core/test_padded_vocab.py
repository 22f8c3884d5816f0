"""Pairs whose vocabularies differ only in padding (as Qwen2.5 0.5B vs 7B do) decode exactly.

The padded model is the built-in F32 target with extra vocabulary entries "[PAD<i>]"
whose embedding rows are 3x the rows of the tokens the target emits for the test prompt
(SmolLM2 ties its output matrix to token_embd, so each padded id's logit is 3x that
token's logit). An engine that looked past the shared ids would therefore pick padded ids,
and a drafter that did would propose ids the other model does not have. The checks:

  * llama.cpp loads the padded file, and its logits over the shared ids are the target's
    (greedy over them gives the same tokens), while its unrestricted argmax is a padded id;
  * padded target, Q4_1 draft: greedy output equals the unpadded target alone, no id >= the
    shared size is emitted, also when sampling;
  * padded draft, unpadded target: the same, and no drafted id >= the shared size.

Run under the llama.cpp lock: flock /tmp/specdec-llama.lock python -m pytest tests/test_padded_vocab.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gguf_padding import read_f32_tensor, write_padded
from specdec_cli.llama.model import LlamaModel
from specdec_cli.causal_model import catch_up
from specdec_cli.decoding.engine import Engine, GenerationConfig
from specdec_cli.tuning.policy import draft_policy
from specdec_cli.events import Finished, Rejected, Round, Token
from specdec_cli.maths.sampling import GREEDY
from specdec_cli.session import LoadedPair, check_pair
from stat_checks import PLAIN

pytestmark = pytest.mark.model

# A raw prompt whose greedy continuation has no near-tie: llama.cpp's logits move by ~5e-3
# with how a prefix is split into batches, so the top two logits must stay apart by more.
PROMPT = "Once upon a time"
N_TOKENS = 24
MIN_GAP = 0.05
MAX_PADDING = 64
PAD_SCALE = 3.0


def run(engine: Engine, prompt: list[int], config: GenerationConfig) -> list:
    return list(engine.generate(prompt, config, draft_policy(4)))  # k = 4 for every speculative engine here


def finished(events: list) -> Finished:
    return next(e for e in events if isinstance(e, Finished))


@pytest.fixture(scope="module")
def baseline(builtin_models):
    """The unpadded F32 target alone, greedy: (prompt ids, config, output tokens)."""
    _, target = builtin_models
    prompt = target.tokenize(PROMPT)
    config = GenerationConfig(max_tokens=N_TOKENS, sampling=GREEDY, seed=0)
    tokens = finished(run(Engine(target), prompt, config)).tokens
    assert len(tokens) == N_TOKENS
    context, gaps = list(prompt), []
    for token in tokens:  # one step at a time, as the baseline ran
        row = catch_up(target, context)[0]
        top2 = np.partition(row, -2)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        assert int(np.argmax(row)) == token
        context.append(token)
    assert min(gaps) > MIN_GAP, f"a near-tie in the baseline (gaps {sorted(gaps)[:3]}); pick another PROMPT"
    return prompt, config, tokens


@pytest.fixture(scope="module")
def padded(builtin_paths, baseline, tmp_path_factory):
    """(padded model loaded with a context, shared vocabulary size)."""
    _, target_path = builtin_paths
    _, _, tokens = baseline
    ids = sorted(set(tokens))[:MAX_PADDING]
    embd = read_f32_tensor(Path(target_path), "token_embd.weight")
    path = tmp_path_factory.mktemp("padded") / "SmolLM2-135M-Instruct.F32.padded.gguf"
    n_vocab = write_padded(Path(target_path), path, PAD_SCALE * embd[ids])
    assert n_vocab == embd.shape[0] + len(ids)
    model = LlamaModel(path, n_ctx=2048)
    yield model, embd.shape[0]
    model.close()


def test_llama_cpp_loads_the_padded_file_and_only_padding_differs(padded, baseline):
    model, shared = padded
    prompt, _, tokens = baseline
    assert model.n_vocab > shared and model.token_text(shared) == f"[PAD{shared}]"
    rows = catch_up(model, list(prompt) + list(tokens[:-1]), len(tokens)).copy()
    assert rows.shape == (len(tokens), model.n_vocab)
    # over the shared ids the padded model is the target: greedy picks the same tokens
    assert [int(np.argmax(row[:shared])) for row in rows] == list(tokens)
    # over all ids it would not: a padded id wins at some (here: most) positions
    unrestricted = [int(np.argmax(row)) for row in rows]
    assert sum(i >= shared for i in unrestricted) >= 1, unrestricted


def test_padded_target_greedy_output_equals_the_target_alone(padded, baseline, builtin_models):
    model, shared = padded
    draft, _ = builtin_models
    prompt, config, tokens = baseline
    pair = LoadedPair(target=model, draft=draft, vocab_limit=check_pair(draft, model))
    assert pair.vocab_limit == shared
    events = run(pair.engine(), prompt, config)
    assert finished(events).tokens == tokens
    assert all(e.id < shared for e in events if isinstance(e, (Token, Rejected)))
    assert sum(e.drafted for e in events if isinstance(e, Round)) > 0, "the draft took part"
    assert finished(run(pair.engine(speculative=False), prompt, config)).tokens == tokens


def test_padded_draft_never_proposes_an_id_the_target_lacks(padded, baseline, builtin_models):
    model, shared = padded
    _, target = builtin_models
    prompt, config, tokens = baseline
    pair = LoadedPair(target=target, draft=model, vocab_limit=check_pair(model, target))
    assert pair.vocab_limit == shared
    events = run(pair.engine(), prompt, config)
    assert finished(events).tokens == tokens
    assert all(e.id < shared for e in events if isinstance(e, (Token, Rejected)))
    rounds = [e for e in events if isinstance(e, Round)]
    assert sum(r.drafted for r in rounds) > 0 and sum(r.accepted for r in rounds) > 0


def test_sampling_with_a_padded_target_emits_only_shared_ids(padded, baseline, builtin_models):
    # Unrestricted, the padded ids hold most of the probability mass (their logits are 3x the
    # likeliest real tokens'), so a leak would show within a few tokens. 48 sampled tokens, seed 7.
    model, shared = padded
    draft, _ = builtin_models
    prompt, _, _ = baseline
    pair = LoadedPair(target=model, draft=draft, vocab_limit=check_pair(draft, model))
    config = GenerationConfig(max_tokens=48, sampling=PLAIN, seed=7)
    events = run(pair.engine(), prompt, config)
    emitted = [e.id for e in events if isinstance(e, Token)]
    assert emitted and max(emitted) < shared
    assert all(e.id < shared for e in events if isinstance(e, Rejected))
