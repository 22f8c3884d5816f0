"""The KV rollback of a failed decode, on the real backend (llama/model.LlamaModel, marker `model`).

A decode of more than n_batch tokens goes to llama.cpp in chunks. When a later chunk fails,
the earlier ones are already in the KV cache; `decode` must drop them, so that the cache holds
exactly `tokens` again and the next decode at those positions works and scores as a fresh
model does. Here llama_decode is made to fail on the second chunk (n_batch 8).
"""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from specdec_cli.errors import SpecdecError
from specdec_cli.llama import model as llama_model
from specdec_cli.llama.model import LlamaModel

pytestmark = pytest.mark.model

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the green forest."


def test_a_decode_that_fails_between_chunks_leaves_the_cache_holding_exactly_its_tokens(builtin_paths, monkeypatch):
    draft_path, _ = builtin_paths
    with LlamaModel(draft_path, n_ctx=256, n_batch=8, n_threads=2) as model:
        prompt = model.tokenize(TEXT)
        assert len(prompt) >= 3 + 2 * 8 + 1, len(prompt)
        model.decode(prompt[:3], n_logits=0)
        real, sizes = llama_cpp.llama_decode, []

        def second_chunk_fails(ctx, batch):
            sizes.append(batch.n_tokens)
            return 1 if len(sizes) == 2 else real(ctx, batch)

        monkeypatch.setattr(llama_model.lc, "llama_decode", second_chunk_fails)
        with pytest.raises(SpecdecError, match="llama_decode failed with code 1"):
            model.decode(prompt[3:], n_logits=1)
        monkeypatch.undo()
        assert sizes[0] == 8 and len(sizes) == 2  # one chunk of 8 went into the cache before the failure
        assert model.tokens == prompt[:3]
        assert llama_cpp.llama_memory_seq_pos_max(model._memory, 0) == 2  # the cache holds positions 0..2 only
        again = model.decode(prompt[3:], n_logits=1).copy()
    with LlamaModel(draft_path, n_ctx=256, n_batch=8, n_threads=2) as fresh:
        expected = fresh.decode(prompt, n_logits=1).copy()
    np.testing.assert_allclose(again, expected, rtol=0, atol=1e-3)


def test_a_sibling_context_shares_the_weights_and_keeps_a_cache_of_its_own(builtin_paths):
    draft_path, _ = builtin_paths
    with LlamaModel(draft_path, n_ctx=256, n_threads=2) as model:
        prompt = model.tokenize(TEXT)
        first = np.array(model.decode(prompt[:10], n_logits=1))
        twin = model.sibling()
        try:
            assert twin.n_ctx == model.n_ctx and twin.tokens == [] and twin._model is model._model
            again = np.array(twin.decode(prompt[:10], n_logits=1))  # its own empty cache: the same logits
            np.testing.assert_allclose(again, first, rtol=1e-4, atol=1e-4)
            twin.decode(prompt[10:14], n_logits=1)
            assert model.tokens == prompt[:10] and twin.tokens == prompt[:14]
        finally:
            twin.close()
        # The weights outlive the sibling: the owner decodes on from its own cache.
        np.testing.assert_allclose(np.array(model.decode(prompt[10:14], n_logits=1)), np.array(twin_free_logits(draft_path, prompt[:14])), rtol=1e-4, atol=1e-4)


def twin_free_logits(path, tokens) -> np.ndarray:
    """The last row's logits of `tokens` in a model of its own."""
    with LlamaModel(path, n_ctx=256, n_threads=2) as fresh:
        return np.array(fresh.decode(tokens, n_logits=1))
