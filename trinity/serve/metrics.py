"""The /metrics exposition through prometheus_client, on a registry of the app's own.

An own CollectorRegistry (never the process-global one) so two apps in one process (tests, a benchmark
next to a server) count apart and Prefect's or any library's metrics stay out of this endpoint.
Labels hold model, role, status and end-reason names only; never a prompt, a reply or a key.

Names and labels are the ones the hand-written exposition had. prometheus_client adds a `_created`
sample per counter and histogram series (when the series started) and writes bucket bounds as floats
(`le="1.0"` where the old text had `le="1"`); both mean the same to Prometheus.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

if TYPE_CHECKING:
    from trinity.pool.types import CallResult

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TURN_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10)
QUEUE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Slots(Protocol):
    """What the gauges read: episodes running and requests waiting (trinity.serve.admission.Admission)."""

    @property
    def in_flight(self) -> int: ...

    @property
    def waiting(self) -> int: ...


class Metrics:
    """The serving metrics. Label names are declared in alphabetical order, the order the hand-written
    text had, so a series reads the same as before."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.in_flight: Callable[[], int] = lambda: 0   # the app's admission, once it calls watch_slots
        self.queued: Callable[[], int] = lambda: 0
        r = self.registry
        self.requests = Counter("trinity_serve_requests_total", "HTTP requests by path and status code",
                                ("path", "status"), registry=r)
        self.request_seconds = Histogram("trinity_serve_request_duration_seconds",
                                         "HTTP request handling time (streams: until the last byte)", ("path",),
                                         buckets=DURATION_BUCKETS, registry=r)
        # read at scrape time, so the app may point them at its admission afterwards (watch_slots)
        Gauge("trinity_serve_in_flight_episodes", "episodes running now", registry=r).set_function(
            lambda: self.in_flight())
        Gauge("trinity_serve_queued_requests", "requests waiting for an episode slot now", registry=r).set_function(
            lambda: self.queued())
        self.queue_wait_seconds = Histogram(
            "trinity_serve_queue_wait_seconds", "time a request waited for an episode slot, by outcome (admitted, "
            "queue_full, timeout, shutdown, disconnected); 0 when it was admitted at once", ("outcome",),
            buckets=QUEUE_BUCKETS, registry=r)
        self.episodes = Counter("trinity_serve_episodes_total", "finished episodes by end reason", ("end_reason",),
                                registry=r)
        self.episode_turns = Histogram("trinity_serve_episode_turns", "turns per finished episode",
                                       buckets=TURN_BUCKETS, registry=r)
        self.pool_calls = Counter("trinity_serve_pool_calls_total", "pool calls by model, role and outcome",
                                  ("model", "ok", "role"), registry=r)
        self.pool_tokens = Counter("trinity_serve_pool_tokens_total", "pool tokens by model and kind",
                                   ("kind", "model"), registry=r)
        self.pool_cost = Counter("trinity_serve_pool_cost_usd_total", "pool cost in USD by model", ("model",),
                                 registry=r)

    def watch_slots(self, slots: Slots) -> None:
        """Read the two gauges from `slots` (the app's admission) at scrape time."""
        self.in_flight = lambda: slots.in_flight
        self.queued = lambda: slots.waiting

    # -- domain events ----------------------------------------------------------------------------
    def request(self, path: str, status: int, seconds: float) -> None:
        self.requests.labels(path=path, status=str(status)).inc()
        self.request_seconds.labels(path=path).observe(seconds)

    def queue_wait(self, outcome: str, seconds: float) -> None:
        self.queue_wait_seconds.labels(outcome=outcome).observe(seconds)

    def pool_call(self, role: str, result: CallResult) -> None:
        model = result.model
        self.pool_calls.labels(model=model, ok=str(bool(result.ok)).lower(), role=role).inc()
        self.pool_tokens.labels(kind="prompt", model=model).inc(result.prompt_tokens)
        self.pool_tokens.labels(kind="completion", model=model).inc(result.completion_tokens)
        self.pool_cost.labels(model=model).inc(result.cost_usd)

    def episode(self, trace: dict[str, Any]) -> None:
        self.episodes.labels(end_reason=trace["end_reason"]).inc()
        self.episode_turns.observe(trace["turns_used"])

    # -- exposition -------------------------------------------------------------------------------
    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) for a scrape: the Prometheus text format, or OpenMetrics when the
        scraper's Accept header asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
