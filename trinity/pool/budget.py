"""The run budget and the running totals of a pool client.

A Budget is shared by every call of a run (and may be shared by several clients). `max_calls` is
reserved before a call is sent, so concurrent calls never exceed it; cost and tokens are only known after
a reply, so they stop NEW calls once spent (calls already in flight finish and are saved). Cache hits are
free: they spend no budget and count as `cache_hits`, not `real_calls`.
Both classes are thread-safe: one client may serve several event loops (one per worker thread).
On Dask the run's amounts live on the scheduler (trinity.pool.shared_limits), which applies this same
Budget arithmetic to them and mirrors them into each process's Budget.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.evolve import BudgetLimits


@dataclass
class Budget:
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_calls: int | None = None
    # spent so far (real calls only); explicit so a run can save and restore it
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:  # picklable (process pools, checkpoints): the lock is not state
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Budget:
        """Inverse of to_dict: limits and amounts spent, e.g. to resume a run."""
        keys = ("max_cost_usd", "max_tokens", "max_calls", "calls", "tokens", "cost_usd")
        return cls(**{k: d[k] for k in keys if k in d})

    @classmethod
    def from_config(cls, limits: BudgetLimits) -> Budget:
        """From the typed `cfg.evolve.budget` (max_cost_usd, max_tokens, max_calls; None = unlimited)."""
        return cls(max_cost_usd=limits.max_cost_usd, max_tokens=limits.max_tokens, max_calls=limits.max_calls)

    @property
    def reason(self) -> str | None:
        """Why no new call may start, or None while budget is left."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            return f"budget: max_calls={self.max_calls} reached ({self.calls} calls)"
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"budget: max_tokens={self.max_tokens} reached ({self.tokens} tokens)"
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            return f"budget: max_cost_usd={self.max_cost_usd} reached (${self.cost_usd:.6f} spent)"
        return None

    @property
    def exhausted(self) -> bool:
        return self.reason is not None

    def try_reserve_call(self) -> str | None:
        """Count one real call if budget is left. Returns None when reserved, else the refusal reason."""
        with self._lock:
            reason = self.reason
            if reason is None:
                self.calls += 1
            return reason

    def spend(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.cost_usd += cost_usd

    def spent(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": self.calls, "tokens": self.tokens, "cost_usd": self.cost_usd}

    def load_spent(self, spent: Mapping[str, Any]) -> None:
        """Take amounts spent elsewhere (the run-wide ledger of a Dask run) as this budget's own."""
        with self._lock:
            self.calls, self.tokens, self.cost_usd = int(spent["calls"]), int(spent["tokens"]), float(spent["cost_usd"])

    def to_dict(self) -> dict[str, Any]:
        return {"max_cost_usd": self.max_cost_usd, "max_tokens": self.max_tokens, "max_calls": self.max_calls,
                "calls": self.calls, "tokens": self.tokens, "cost_usd": self.cost_usd,
                "exhausted": self.exhausted, "reason": self.reason}


COUNTERS = ("calls", "real_calls", "cache_hits", "failures", "budget_refusals", "replay_misses", "retries",
            "prompt_tokens", "completion_tokens", "cost_usd", "latency_s", "replayed")


class RunTotals:
    """Running totals per pool model. `calls` counts every chat() call; tokens and cost count real calls
    only (a cache hit is free); `latency_s` sums the wall time of real calls."""

    def __init__(self, model_names: list[str]):
        self._lock = threading.Lock()
        self._per_model = {name: dict.fromkeys(COUNTERS, 0) for name in model_names}

    def record(self, result: Any, *, real: bool) -> None:
        """Add one CallResult; `real`: the call went to the network (not a cache hit, not a shared reply,
        not a replay miss). A budget refusal is never real."""
        real = real and not result.budget_exhausted
        with self._lock:
            t = self._per_model[result.model]
            t["calls"] += 1
            t["real_calls"] += int(real)
            t["cache_hits"] += int(result.cached)
            t["failures"] += int(not result.ok)
            t["budget_refusals"] += int(result.budget_exhausted)
            # counted with the other totals, so a Dask run's workers hand theirs to the driver
            t["replay_misses"] += int(result.error_kind == "CacheMissError")
            t["retries"] += result.retries
            # served from a recording (pool.replay): counted as real, with the recorded tokens, cost and latency
            t["replayed"] += int(getattr(result, "replayed", False))
            if real:
                t["prompt_tokens"] += result.prompt_tokens
                t["completion_tokens"] += result.completion_tokens
                t["cost_usd"] += result.cost_usd
                t["latency_s"] += result.latency_s

    def take(self) -> dict[str, dict[str, Any]]:
        """The counts per model so far, leaving zeros: what a Dask worker hands to the run's totals."""
        with self._lock:
            taken = self._per_model
            self._per_model = {name: dict.fromkeys(COUNTERS, 0) for name in taken}
        return taken

    def add(self, per_model: Mapping[str, Mapping[str, Any]]) -> None:
        """Add counts taken from another RunTotals (e.g. given back after a failed hand-over)."""
        with self._lock:
            add_counts(self._per_model, per_model)

    def snapshot(self, plus: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """`plus`: counts per model made elsewhere (the other processes of a Dask run), added in."""
        with self._lock:
            per_model = {name: dict(t) for name, t in self._per_model.items()}
        add_counts(per_model, plus or {})
        overall = dict.fromkeys(COUNTERS, 0)
        for t in per_model.values():
            for key in COUNTERS:
                overall[key] += t[key]
        return {"overall": overall, "per_model": per_model}


def add_counts(into: dict[str, dict[str, Any]],
               per_model: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Add per-model counters into `into` (in place; a model not there yet starts at zero)."""
    for name, counts in per_model.items():
        t = into.setdefault(name, dict.fromkeys(COUNTERS, 0))
        for key in COUNTERS:
            t[key] += counts.get(key, 0)
    return into
