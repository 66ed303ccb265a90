"""Prometheus text exposition (format 0.0.4), hand-written: counters, one gauge, two histograms.

Labels hold model, role, status and end-reason names only; never a prompt, a reply or a key.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TURN_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10)

HELP = {
    "trinity_serve_requests_total": ("counter", "HTTP requests by path and status code"),
    "trinity_serve_request_duration_seconds": ("histogram", "HTTP request handling time (streams: until the last byte)"),
    "trinity_serve_in_flight_episodes": ("gauge", "episodes running now"),
    "trinity_serve_episodes_total": ("counter", "finished episodes by end reason"),
    "trinity_serve_episode_turns": ("histogram", "turns per finished episode"),
    "trinity_serve_pool_calls_total": ("counter", "pool calls by model, role and outcome"),
    "trinity_serve_pool_tokens_total": ("counter", "pool tokens by model and kind"),
    "trinity_serve_pool_cost_usd_total": ("counter", "pool cost in USD by model"),
}


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    def esc(v: Any) -> str:
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}"


class Metrics:
    def __init__(self, in_flight: Callable[[], int] = lambda: 0):
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self._hist: dict[str, dict[tuple, list]] = defaultdict(dict)
        self._buckets = {"trinity_serve_request_duration_seconds": DURATION_BUCKETS,
                         "trinity_serve_episode_turns": TURN_BUCKETS}
        self.in_flight = in_flight

    def inc(self, name: str, value: float = 1.0, **labels: Any) -> None:
        with self._lock:
            self._counters[name][tuple(sorted(labels.items()))] += value

    def observe(self, name: str, value: float, **labels: Any) -> None:
        buckets = self._buckets[name]
        with self._lock:
            h = self._hist[name].setdefault(tuple(sorted(labels.items())), [[0] * len(buckets), 0, 0.0])
            for i, bound in enumerate(buckets):
                if value <= bound:
                    h[0][i] += 1
            h[1] += 1
            h[2] += value

    # -- domain events ----------------------------------------------------------------------------
    def request(self, path: str, status: int, seconds: float) -> None:
        self.inc("trinity_serve_requests_total", path=path, status=status)
        self.observe("trinity_serve_request_duration_seconds", seconds, path=path)

    def pool_call(self, role: str, result: Any) -> None:
        self.inc("trinity_serve_pool_calls_total", model=result.model, role=role, ok=str(bool(result.ok)).lower())
        self.inc("trinity_serve_pool_tokens_total", result.prompt_tokens, model=result.model, kind="prompt")
        self.inc("trinity_serve_pool_tokens_total", result.completion_tokens, model=result.model, kind="completion")
        self.inc("trinity_serve_pool_cost_usd_total", result.cost_usd, model=result.model)

    def episode(self, trace: dict[str, Any]) -> None:
        self.inc("trinity_serve_episodes_total", end_reason=trace["end_reason"])
        self.observe("trinity_serve_episode_turns", trace["turns_used"])

    # -- exposition -------------------------------------------------------------------------------
    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            counters = {n: dict(v) for n, v in self._counters.items()}
            hists = {n: {k: [list(h[0]), h[1], h[2]] for k, h in v.items()} for n, v in self._hist.items()}
        for name, (kind, text) in HELP.items():
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            if kind == "gauge":
                lines.append(f"{name} {self.in_flight()}")
            elif kind == "counter":
                for key, value in sorted(counters.get(name, {}).items()):
                    lines.append(f"{name}{_labels(dict(key))} {float(value)!r}")
            else:
                for key, (counts, count, total) in sorted(hists.get(name, {}).items()):
                    labels = dict(key)
                    for bound, c in zip(self._buckets[name], counts):
                        lines.append(f"{name}_bucket{_labels({**labels, 'le': f'{bound:g}'})} {c}")
                    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {count}")
                    lines.append(f"{name}_sum{_labels(labels)} {float(total)!r}")
                    lines.append(f"{name}_count{_labels(labels)} {count}")
        return "\n".join(lines) + "\n"
