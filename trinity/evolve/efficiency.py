"""How close a generation ran to its floor: the least wall time the pool work it did could have taken.

Only *pool work* counts: network calls that reached a server (`Turn.called` and not `Turn.cached`);
response-cache hits and requests that shared another call's reply in flight did no pool work.

- Per episode: `decode_tokens` (completion tokens), `prefill_tokens` (prompt tokens minus those the server
  took from its KV prefix cache) and `pool_latency_s` (summed latencies) of those calls.
- Per generation, `floor_s` is the largest of these lower bounds: the longest episode's pool_latency_s
  (an episode's turns run one after another); for a hosted model m, t_m = decode_tokens_m / decode_tok_s_m
  + prefill_tokens_m / prefill_tok_s_m; for the local servers, which share this machine's cores, their
  CPU time: t_m was measured with the whole pool loaded, when m's threads had `loaded_cores_m` cores, so its
  work costs c_m = t_m * loaded_cores_m core-seconds; alone m can use `max_cores_m` (its threads), so
  c_m / max_cores_m for each, and together sum(c_m) / (the cores they share) ("cpu"). A lone busy model
  thus runs faster than its loaded rate without the floor exceeding the wall time.
  The throughputs are `pool.models.<m>.throughput.{decode_tok_s, prefill_tok_s}` (measured with
  benchmarks/local_pool_throughput.py). A model without both is left out of the max; when no model has
  them (a hosted pool, or values not measured yet) the floor is unknown (None).
- `efficiency = floor_s / wall_s` (None when either is unknown).

Everything here is pure: traces and config in, numbers out.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trinity.config_schema.pool import PoolConfig, PoolModel
from trinity.episodes.trace import Trace, Turn


@dataclass(frozen=True)
class Throughput:
    """Measured tokens per second of one pool model while the whole pool is loaded. A local server also
    knows the cores it had then (`loaded_cores`: its threads' share of this machine's cores) and the most
    it can use alone (`max_cores`: its threads, at most the machine's cores); None for a hosted model."""
    decode_tok_s: float
    prefill_tok_s: float
    loaded_cores: float | None = None
    max_cores: float | None = None

    def seconds(self, decode_tokens: int, prefill_tokens: int) -> float:
        return decode_tokens / self.decode_tok_s + prefill_tokens / self.prefill_tok_s


@dataclass(frozen=True)
class PoolWork:
    """The pool work of a set of episodes."""
    decode_tokens: dict[str, int] = field(default_factory=dict)   # per pool model
    prefill_tokens: dict[str, int] = field(default_factory=dict)  # per pool model
    longest_episode_s: float | None = None                        # None: no episodes

    @property
    def total_decode_tokens(self) -> int:
        return sum(self.decode_tokens.values())

    @property
    def total_prefill_tokens(self) -> int:
        return sum(self.prefill_tokens.values())


def model_throughput(model: PoolModel | None) -> Throughput | None:
    """`pool.models.<m>.throughput` as a Throughput; None unless both rates are given."""
    given = model.throughput if model is not None else None
    if given is None or given.decode_tok_s is None or given.prefill_tok_s is None:
        return None
    return Throughput(float(given.decode_tok_s), float(given.prefill_tok_s))


def pool_throughputs(pool: PoolConfig | None, cores: int | None = None) -> dict[str, Throughput | None]:
    """Every model of the typed pool section (in pool order) -> its Throughput, or None when it is not
    configured. Local servers (the models whose config writes `n_threads`) share this machine's `cores`
    (default: the cores this process may use): under the measurement's full load each thread had
    min(1, cores / all threads) of a core."""
    models = pool.models if pool is not None else {}
    out = {str(name): model_throughput(m) for name, m in models.items()}
    threads = {str(name): int(m.n_threads) for name, m in models.items() if "n_threads" in m.written}
    if not threads:
        return out
    if not cores:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_thread = min(1.0, cores / sum(threads.values()))
    for name, n in threads.items():
        tp = out.get(name)
        if tp is not None:
            out[name] = replace(tp, loaded_cores=n * per_thread, max_cores=float(min(n, cores)))
    return out


def network_turns(trace: Trace) -> Iterator[Turn]:
    """The turns whose call reached a pool server (not a response-cache hit, not a reply replayed from a
    recording, not a call never sent)."""
    return (t for t in trace.turns if t.called and not t.cached and not t.replayed)


def prefill_tokens(turn: Turn) -> int:
    return max(int(turn.prompt_tokens) - int(turn.cached_prompt_tokens), 0)


def episode_work(trace: Trace) -> dict[str, Any]:
    """The episode-row columns: `decode_tokens`, `prefill_tokens`, `pool_latency_s` of its network calls."""
    turns = list(network_turns(trace))
    return {"decode_tokens": sum(int(t.completion_tokens) for t in turns),
            "prefill_tokens": sum(prefill_tokens(t) for t in turns),
            "pool_latency_s": float(sum(t.latency_s for t in turns))}


def pool_work(traces: Iterable[Trace]) -> PoolWork:
    """Per-model decode and prefill tokens and the longest episode's pool latency over `traces`."""
    decode: dict[str, int] = {}
    prefill: dict[str, int] = {}
    longest: float | None = None
    for trace in traces:
        latency = 0.0
        for t in network_turns(trace):
            decode[t.agent] = decode.get(t.agent, 0) + int(t.completion_tokens)
            prefill[t.agent] = prefill.get(t.agent, 0) + prefill_tokens(t)
            latency += t.latency_s
        longest = latency if longest is None else max(longest, latency)
    return PoolWork(decode, prefill, longest)


def model_seconds(work: PoolWork, throughputs: Mapping[str, Throughput | None]) -> dict[str, float | None]:
    """Per pool model: the least time its decode and prefill work takes (None: throughput unknown)."""
    return {m: None if tp is None else tp.seconds(work.decode_tokens.get(m, 0), work.prefill_tokens.get(m, 0))
            for m, tp in throughputs.items()}


def floor_s(work: PoolWork, throughputs: Mapping[str, Throughput | None]) -> tuple[float | None, str | None]:
    """(floor in seconds, what bounds it: "episode" or the model name); (None, None) when no model's
    throughput is known or there were no episodes."""
    known = {m: s for m, s in model_seconds(work, throughputs).items() if s is not None}
    if not work.decode_tokens and not work.prefill_tokens:
        return None, None   # no call reached a server (a replayed recording, a warm cache): no floor to compare
    if not known or work.longest_episode_s is None:
        return None, None
    return work_floor(known, throughputs, {"episode": work.longest_episode_s})


def work_floor(seconds: Mapping[str, float], throughputs: Mapping[str, Throughput | None],
               bounds: dict[str, float] | None = None) -> tuple[float, str]:
    """The least wall time of per-model work `seconds` (each at its loaded throughput): a hosted model
    takes its own time; the local servers share this machine's cores (module doc). `bounds` are other
    lower bounds to include (e.g. the longest episode). Returns (seconds, what bounds it)."""
    bounds = dict(bounds or {})
    local_core_s = 0.0
    for m, t in seconds.items():
        tp = throughputs.get(m)
        if tp is None or tp.loaded_cores is None or tp.max_cores is None:   # hosted: its own hardware
            bounds[m] = t
            continue
        core_s = t * tp.loaded_cores             # the CPU time its work takes
        bounds[m] = core_s / tp.max_cores        # alone, it gets at most its threads' cores
        local_core_s += core_s
    # every local server's share at the measurement adds up to the cores the pool runs on
    cores = sum(tp.loaded_cores for tp in throughputs.values() if tp is not None and tp.loaded_cores is not None)
    if local_core_s and cores:
        bounds["cpu"] = local_core_s / cores     # together, the local servers share the machine's cores
    if not bounds:
        return 0.0, "none"
    bound = max(bounds, key=bounds.__getitem__)
    return bounds[bound], bound


def efficiency(floor: float | None, wall_s: float | None) -> float | None:
    """floor / wall; None when either is unknown or the wall time is not positive."""
    if floor is None or wall_s is None or wall_s <= 0:
        return None
    return floor / wall_s


def generation_summary(traces: Iterable[Trace], throughputs: Mapping[str, Throughput | None]) -> dict[str, Any]:
    """The generation-row columns computable from traces: decode/prefill tokens, floor_s and floor_bound
    (efficiency needs the wall time, known only at the end of the generation)."""
    work = pool_work(traces)
    floor, bound = floor_s(work, throughputs)
    return {"decode_tokens": work.total_decode_tokens, "prefill_tokens": work.total_prefill_tokens,
            "floor_s": floor, "floor_bound": bound}
