"""Prometheus metrics, named as vLLM names its own under a `pardec:` prefix (spec-decode counters,
latency histograms, queue depth), in a registry of the server's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, max_positions: int = 32):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("pardec:num_requests", "Requests admitted to a running batch", registry=r)
        self.running = Gauge("pardec:num_requests_running", "Requests decoding now", registry=r)
        self.waiting = Gauge("pardec:num_requests_waiting", "Requests queued for a batch row", registry=r)
        self.drafts = Counter("pardec:spec_decode_num_drafts", "Steps that fed drafts", registry=r)
        self.draft_tokens = Counter("pardec:spec_decode_num_draft_tokens", "Draft tokens fed", registry=r)
        self.accepted = Counter("pardec:spec_decode_num_accepted_tokens", "Draft tokens accepted", registry=r)
        self.accepted_per_pos = Counter(
            "pardec:spec_decode_num_accepted_tokens_per_pos", "Drafts accepted at each position",
            ["position"], registry=r,
        )  # fmt: skip
        self.ttft = Histogram("pardec:time_to_first_token_seconds", "Time to first token",
                              buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.itl = Histogram("pardec:inter_token_latency_seconds", "Time per emitted token after the first",
                             buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.max_positions = max_positions

    def record_drafts(self, fed: int, accepted: int) -> None:
        if not fed:
            return
        self.drafts.inc()
        self.draft_tokens.inc(fed)
        self.accepted.inc(accepted)
        for pos in range(min(accepted, self.max_positions)):
            self.accepted_per_pos.labels(position=str(pos)).inc()
