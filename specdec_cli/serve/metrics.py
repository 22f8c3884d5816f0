"""`GET /metrics`: the server's counters in Prometheus' text format, through prometheus_client.

Names follow vLLM's (`vllm:prompt_tokens_total`, `vllm:spec_decode_num_accepted_tokens_per_pos`,
...) and llama-server's `--metrics` (`llamacpp:n_decode_total`, `requests_processing`) where
one exists, under the prefix `specdec:`:

    specdec:http_requests_total{endpoint="/v1/chat/completions",status="200"}   requests answered
    specdec:prompt_tokens_total / prompt_tokens_cached_total / prompt_tokens_evaluated_total
    specdec:generation_tokens_total                                              tokens generated
    specdec:spec_decode_num_draft_tokens_total / spec_decode_num_accepted_tokens_total
    specdec:spec_decode_num_draft_tokens_per_pos_total{position="1"} / ..._accepted_tokens_per_pos_total
    specdec:n_decode_total                                                       target passes
    specdec:target_tokens_decoded                                                tokens the target's llama_decode evaluated
    specdec:num_requests_waiting / num_requests_running                          the queue, now
    specdec:time_to_first_token_seconds / e2e_request_latency_seconds            histograms

Each app has its own registry (no global state: the tests start many apps in one process).

    metrics = Metrics(waiting=lambda: 2, running=lambda: 1, decoded=lambda: 530)
    metrics.finished(stats, cached_tokens=5, first_token_seconds=0.1, seconds=0.9)
    metrics.answered("/v1/completions", 200)
    metrics.render()  # -> b"# HELP specdec:http_requests_total Requests answered, by endpoint and status ..."

Left out: which requests count (middleware.py and completions.py call these), the figures themselves (decoding/stats.py).
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..decoding.stats import RunStats

CONTENT_TYPE = CONTENT_TYPE_LATEST
P = "specdec:"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self, waiting: Callable[[], float], running: Callable[[], float], decoded: Callable[[], float]) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(P + "http_requests", "Requests answered, by endpoint and status", ["endpoint", "status"], registry=r)
        self.prompt = Counter(P + "prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.cached = Counter(P + "prompt_tokens_cached", "Prompt tokens found in the KV cache", registry=r)
        self.evaluated = Counter(P + "prompt_tokens_evaluated", "Prompt tokens the target evaluated", registry=r)
        self.generated = Counter(P + "generation_tokens", "Tokens generated", registry=r)
        self.drafted = Counter(P + "spec_decode_num_draft_tokens", "Draft tokens proposed to the target", registry=r)
        self.accepted = Counter(P + "spec_decode_num_accepted_tokens", "Draft tokens the target accepted", registry=r)
        self.drafted_at = Counter(P + "spec_decode_num_draft_tokens_per_pos", "Draft tokens tried, by position in the round", ["position"], registry=r)
        self.accepted_at = Counter(P + "spec_decode_num_accepted_tokens_per_pos", "Draft tokens accepted, by position in the round", ["position"], registry=r)
        self.passes = Counter(P + "n_decode", "Target passes (one verification batch each)", registry=r)
        Gauge(P + "num_requests_waiting", "Requests waiting in the queue", registry=r).set_function(waiting)
        Gauge(P + "num_requests_running", "Requests generating", registry=r).set_function(running)
        # The backend's own count (llama/model.LlamaModel.decoded), not one derived from the cache's claim.
        Gauge(P + "target_tokens_decoded", "Tokens the target model has evaluated since it loaded", registry=r).set_function(decoded)
        self.first_token = Histogram(P + "time_to_first_token_seconds", "From the request's arrival to its first token", buckets=LATENCY_BUCKETS, registry=r)
        self.latency = Histogram(P + "e2e_request_latency_seconds", "From the request's arrival to its last token", buckets=LATENCY_BUCKETS, registry=r)

    def answered(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()

    def finished(self, stats: RunStats, cached_tokens: int, first_token_seconds: float | None, seconds: float) -> None:
        """A generation that ended (its figures; a client that left early counts only in `answered`)."""
        self.prompt.inc(stats.prompt_tokens)
        self.cached.inc(cached_tokens)
        self.evaluated.inc(max(stats.prompt_tokens - cached_tokens, 0))
        self.generated.inc(stats.new_tokens)
        self.drafted.inc(stats.drafted)
        self.accepted.inc(stats.accepted)
        for i, (tried, kept) in enumerate(zip(stats.drafted_by_position, stats.accepted_by_position), 1):
            self.drafted_at.labels(position=str(i)).inc(tried)
            self.accepted_at.labels(position=str(i)).inc(kept)
        self.passes.inc(stats.target_passes)
        if first_token_seconds is not None:
            self.first_token.observe(first_token_seconds)
        self.latency.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
