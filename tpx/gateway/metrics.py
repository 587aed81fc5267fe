"""Prometheus metrics of one gateway process (its own registry, text format at /metrics)."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class Metrics:
    """Requests, errors by MODEL_* code, spec actions, upstream latency, open streams."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tpx_gateway_requests",
            "HTTP requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "tpx_gateway_errors",
            "Failed requests by code (MODEL_* for exchanges, GATEWAY_* for refusals)",
            ["code"],
            registry=self.registry,
        )
        self.actions = Counter(
            "tpx_gateway_spec_actions",
            "Spec actions taken by the per-request exchanges",
            ["action"],
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "tpx_gateway_upstream_latency_seconds",
            "Seconds from sending the upstream request to its response headers",
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.tokenizer_fallbacks = Counter(
            "tpx_gateway_tokenizer_fallbacks",
            "Counts the upstream's tokenizer endpoint did not give (the estimate counted), "
            "by reason (busy, timeout, too_large, error, status, unreadable, implausible)",
            ["reason"],
            registry=self.registry,
        )
        self.tokenizer_latency = Histogram(
            "tpx_gateway_tokenizer_latency_seconds",
            "Seconds a call to the upstream's tokenizer endpoint took (waiting for an upstream "
            "slot not included), its reply read",
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.open_streams = Gauge(
            "tpx_gateway_open_streams", "SSE streams open to clients", registry=self.registry
        )

        # [[upstreams]] (tpx.gateway.pool): per upstream
        self.upstream_requests = Counter(
            "tpx_gateway_upstream_requests",
            "Upstream attempts by upstream and outcome (HTTP status, connect, timeout, network)",
            ["upstream", "outcome"],
            registry=self.registry,
        )
        self.upstream_failovers = Counter(
            "tpx_gateway_upstream_failovers",
            "Requests sent on to another attempt after a failure, by the upstream that failed",
            ["upstream"],
            registry=self.registry,
        )
        self.upstream_cooldowns = Counter(
            "tpx_gateway_upstream_cooldowns",
            "Cooldowns an upstream was put into (a connect error, a timeout, a 429/529/5xx)",
            ["upstream"],
            registry=self.registry,
        )
        self.upstream_probes = Counter(
            "tpx_gateway_upstream_probes",
            "Recovery probes of upstreams in cooldown, by upstream and result",
            ["upstream", "result"],
            registry=self.registry,
        )
        self.upstream_in_flight = Gauge(
            "tpx_gateway_upstream_in_flight",
            "Upstream requests in flight, by upstream",
            ["upstream"],
            registry=self.registry,
        )
        self.upstream_cooling = Gauge(
            "tpx_gateway_upstream_cooling",
            "1 while an upstream is in cooldown (until a recovery probe or a reply ends it)",
            ["upstream"],
            registry=self.registry,
        )
        self.upstream_attempt_seconds = Histogram(
            "tpx_gateway_upstream_attempt_seconds",
            "Seconds from sending an attempt to its response headers (or its failure)",
            ["upstream"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
