"""serve/wire.py without a server: its docstring's example, and the legacy endpoint's text offsets."""

from __future__ import annotations

from specdec_cli.decoding.engine import GenerationConfig
from specdec_cli.events import Logprobs, Source, Token
from specdec_cli.serve.types import Settings
from specdec_cli.serve.wire import Answer, completion_logprobs


def settings(top_logprobs: int | None = None) -> Settings:
    return Settings(config=GenerationConfig(), max_tokens=None, draft_tokens=4, drafter="model", p_min=None,
                    top_logprobs=top_logprobs, stream=True, include_usage=False, events=False)  # fmt: skip


def test_the_module_docstring_example():
    answer = Answer(kind="chat", model="SmolLM2", settings=settings(), cached_tokens=0)
    chunk = answer.chunk_for(Token(42, "Hi", Source.DRAFT, 1))
    assert chunk["object"] == "chat.completion.chunk" and chunk["model"] == "SmolLM2" and chunk["id"].startswith("chatcmpl-")
    assert chunk["choices"] == [{"index": 0, "delta": {"content": "Hi"}, "logprobs": None, "finish_reason": None}]


def test_completion_logprobs_docstring_example():
    entries = [{"token": "Hi", "logprob": -0.1, "top_logprobs": []}, {"token": " there", "logprob": -0.2, "top_logprobs": []}]
    assert completion_logprobs(entries)["text_offset"] == [0, 2]
    assert completion_logprobs(entries[1:], 2)["text_offset"] == [2]


def test_streamed_legacy_completions_count_each_tokens_offset_from_the_texts_start():
    answer = Answer(kind="completion", model="m", settings=settings(top_logprobs=0), cached_tokens=0)
    texts = ["Hi", " there", "!", " é"]
    tokens = [Token(i, text, Source.DRAFT, i + 1, Logprobs(-0.5, text.encode())) for i, text in enumerate(texts)]
    streamed = [answer.chunk_for(token)["choices"][0]["logprobs"]["text_offset"] for token in tokens]
    assert streamed == [[0], [2], [8], [9]]
    assert completion_logprobs(answer.entries)["text_offset"] == [0, 2, 8, 9]  # what stream false reports
