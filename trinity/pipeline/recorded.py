"""The pipeline on a recording (pool=recorded): its items, its transcripts' states, exact fitness, bounds.

- `recorded_uids(cfg)`: with `pool.replay` set, every stage's items are the recording's (items.load_split
  filters on them), so no episode asks for a call the recording lacks.
- `RecordedWorld`: the recording opened once, its item trees compiled (trinity.record.exact) over the
  configured protocol and the coordinator's roles.
- `ExactEvaluator`: expected reward and shaping terms of many candidates at once from the compiled trees
  and the coordinator's features of every transcript (cached by the cache_states stage, so with SVF off
  no backbone forward pass runs during evolution).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.config_schema import TrinityConfig
from trinity.config_schema.evolve import Fitness
from trinity.contracts import ROLES
from trinity.evolve.fitness import FitnessParts
from trinity.progress import Progress
from trinity.record import store
from trinity.record.exact import (
    CompiledItem,
    CompiledSet,
    compile_items,
    entropy,
    expectations,
    one_hot_ties,
    recorded_lookup,
)
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Coordinator
    from trinity.record.replay import RecordedReplies


def replay_path(cfg: TrinityConfig) -> Path | None:
    replay = cfg.pool.replay
    return None if replay is None else Path(replay.recording)


@functools.lru_cache(maxsize=8)
def _manifest_uids(path: str, mtime_ns: int) -> frozenset[str]:
    return frozenset(it["uid"] for it in store.read_manifest(Path(path)).get("items", []))


def recorded_uids(cfg: TrinityConfig) -> frozenset[str] | None:
    """The recording's item uids under pool=recorded, else None (every prepared item)."""
    path = replay_path(cfg)
    if path is None:
        return None
    manifest = path / store.MANIFEST
    if not manifest.exists():
        raise store.RecordingError(f"pool.replay.recording: {path} is not a recording ({store.MANIFEST} missing); "
                                   f"make it with `trinity record` or run the live pool (pool=local)")
    return _manifest_uids(str(path), manifest.stat().st_mtime_ns)


class RecordedWorld:
    """A recording with its trees compiled for one protocol, pool and set of roles."""

    def __init__(self, cfg: TrinityConfig, replies: RecordedReplies, roles: Sequence[str]):
        from trinity.pool.providers import resolve_endpoint

        self.protocol = cfg.protocol
        self.agents = tuple(str(m) for m in cfg.pool.models)
        self.roles = tuple(roles)
        self.replies = replies
        rec = replies.recording
        recorded_roles = tuple(rec.manifest["tree"]["roles"])
        missing = [r for r in self.roles if r not in recorded_roles]
        if missing:
            raise store.RecordingError(f"recording {rec.root} has no {', '.join(missing)} calls (roles "
                                       f"{', '.join(recorded_roles)}); set coordinator.roles to a subset of them")
        if int(rec.manifest.get("max_turns", 0)) < self.protocol.max_turns:
            raise store.RecordingError(f"recording {rec.root} goes to {rec.manifest.get('max_turns')} turns; "
                                       f"protocol.max_turns is {self.protocol.max_turns}")
        pool = cfg.pool
        endpoints = {m: resolve_endpoint(m, pool.models[m], pool) for m in self.agents}
        grades = {(r["item"], r["reply"]): float(r["grade"])
                  for r in rec.nodes.select(["item", "reply", "grade"]).iter_rows(named=True) if r["grade"] is not None}
        self.lookup = recorded_lookup(replies, endpoints, self.protocol, grades)
        self.transcripts: list[str] = []
        self._compiled: dict[str, CompiledItem] = {}
        self.samples = int(rec.manifest["tree"]["samples"])

    def compiled(self, items: Sequence[TaskItem]) -> list[CompiledItem]:
        todo = [it for it in items if it.uid not in self._compiled]
        if todo:
            done = compile_items(todo, self.protocol, self.agents, self.roles, self.lookup, samples=self.samples,
                                 transcripts=self.transcripts)
            for c in done.items:
                self._compiled[c.item.uid] = c
        return [self._compiled[it.uid] for it in items]

    def compiled_set(self) -> CompiledSet:
        return CompiledSet(list(self._compiled.values()), self.transcripts, self.agents)


@dataclass(frozen=True)
class ExactValue:
    """A validation (or evaluation) by exact expectation: no episodes."""
    reward: float
    items: int
    per_item: np.ndarray
    tokens: float = float("nan")   # expected prompt + completion tokens per episode
    tokens_per_item: np.ndarray | None = None   # the same per item
    price_per_item: np.ndarray | None = None    # expected list price (USD) per episode, per item

    def cost_per_item(self, unit: str) -> np.ndarray:
        """The fitness's cost per episode of each item in `unit` (evolve.fitness.cost_unit): ktokens or usd."""
        values = self.tokens_per_item if unit == "ktokens" else self.price_per_item
        if values is None:
            return np.zeros(self.items)
        return np.asarray(values, dtype=np.float64) / (1000.0 if unit == "ktokens" else 1.0)


class ExactEvaluator:
    """Expected fitness of candidate parameter vectors on compiled item trees."""

    def __init__(self, coordinator: Coordinator, world: RecordedWorld, weights: Fitness):
        if coordinator.svf is not None:
            raise store.RecordingError("evolve.fitness.estimate=exact needs coordinator.svf.enabled=false (with SVF "
                                       "every candidate reads its own features)")
        self.coord = coordinator
        self.world = world
        self.weights = weights
        self._features: np.ndarray | None = None

    def features(self) -> np.ndarray:
        """Raw backbone features of every compiled transcript: the states stage's (pinned in the feature
        cache) where it computed them, else computed isolated in fixed slices (a variant that reads another
        token position), so the bytes never depend on what the feature cache held from earlier runs."""
        from trinity.pipeline.state_files import STATE_SLICE

        n = len(self.world.transcripts)
        have = 0 if self._features is None else len(self._features)
        if self._features is None or have < n:   # None with no transcript: precompute gives (0, hidden)
            todo = self.world.transcripts[have:]
            parts = []
            # cached states are read in moments; transcripts the states stage left out (another token position,
            # a protocol it did not walk) cost a forward pass each, minutes for thousands: news with an ETA
            with Progress("exact fitness: coordinator features", len(todo), unit="transcripts") as bar:
                for i in range(0, len(todo), STATE_SLICE):
                    part = todo[i:i + STATE_SLICE]
                    parts.append(self.coord.precompute(part, isolated=True))
                    bar.advance(len(part))
            new = np.concatenate(parts or [self.coord.precompute([])])
            self._features = new if self._features is None else np.concatenate([self._features, new])
        return self._features

    def probabilities(self, params: Sequence[np.ndarray], mode: str = "sample") -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's agent and role probabilities on every compiled transcript: (C, T, L) and (C, T, 3);
        (C, T, K, L) and (C, T, K, 3) with a row per turn when a candidate carries a per-turn prior
        (trinity.coordinator.layout), K = protocol.max_turns."""
        F = np.asarray(self.features(), dtype=np.float64)
        L = len(self.world.agents)
        p_agent, p_role = [], []
        mask = np.array([r in self.coord.roles for r in ROLES])
        by_turn = any(self.coord.layout.prior_turns(np.asarray(x, dtype=np.float64)) for x in params)
        turns = self.world.protocol.max_turns
        normalised: dict[int, np.ndarray] = {}   # candidates share the coordinator's statistics: apply once
        for x in params:
            head = self.coord.head_for(np.asarray(x, dtype=np.float64))
            if head.norm is None or not len(F):
                inputs = F
            else:
                cached = normalised.get(id(head.norm))
                if cached is None:
                    cached = normalised[id(head.norm)] = head.norm.apply(F)
                inputs = cached
            # one thin product per candidate: stacking the candidates' weights in one product is ten times
            # faster but rounds otherwise in OpenBLAS's pinned Haswell kernels (trinity.pin_numerics), and
            # evolution's outputs would move
            z = inputs @ head.weights.T
            if by_turn:   # (T, K, L + 3): the prior's row of each turn added (zeros without a prior)
                rows = [head.prior(t) for t in range(turns)]
                z = z[:, None, :] + np.stack([np.zeros(z.shape[1]) if r is None else r for r in rows])[None]
            pa, pr = _softmax(z[..., :L]), _softmax(np.where(mask, z[..., L:], -np.inf))
            if mode == "argmax":
                pa, pr = one_hot_ties(pa), one_hot_ties(pr)
            p_agent.append(pa)
            p_role.append(pr)
        return np.stack(p_agent), np.stack(p_role)

    def population(self, candidates: Sequence[np.ndarray], items: Sequence[TaskItem]) -> list[FitnessParts]:
        compiled = self.world.compiled(items)
        pa, pr = self.probabilities(candidates)
        e = expectations(self.world.compiled_set(), compiled, pa, pr, max_turns=self.world.protocol.max_turns)
        h = entropy(e["agent_shares"])
        cost = e["ktokens"] if self.weights.cost_unit == "ktokens" else e["price_usd"]
        fit = e["reward"] + self.weights.entropy_weight * h - self.weights.turn_weight * e["turn_term"] \
            - self.weights.cost_weight * cost
        return [FitnessParts(float(e["reward"][c]), float(h[c]), float(e["turn_term"][c]), float(cost[c]),
                             float(fit[c])) for c in range(len(candidates))]

    def value(self, params: np.ndarray, items: Sequence[TaskItem], mode: str) -> ExactValue:
        compiled = self.world.compiled(items)
        pa, pr = self.probabilities([params], mode)
        e = expectations(self.world.compiled_set(), compiled, pa, pr, max_turns=self.world.protocol.max_turns)
        return ExactValue(float(e["reward"][0]), len(items), e["reward_per_item"][0], float(e["ktokens"][0]) * 1000.0,
                          e["ktokens_per_item"][0] * 1000.0, e["price_per_item"][0])


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def world_for(cfg: TrinityConfig, pool: Any, roles: Sequence[str]) -> RecordedWorld:
    replies = pool.replay   # a PoolClient's recording (pool=recorded), else None
    if replies is None:
        raise store.RecordingError("this needs pool=recorded (pool.replay): exact fitness and the recording's bounds "
                                   "walk a recording")
    return RecordedWorld(cfg, replies, roles)


def recording_facts(cfg: TrinityConfig) -> dict[str, Any] | None:
    """What reports name: which recording, when, which model files; None on a live pool."""
    path = replay_path(cfg)
    if path is None:
        return None
    m = store.read_manifest(path)
    runs = m.get("runs") or []
    return {"recording": str(path), "name": m.get("name"), "items": len(m.get("items", [])),
            "recorded": [r.get("date") for r in runs][:1] + [r.get("date") for r in runs][-1:],
            "models": [{k: x.get(k) for k in ("name", "model_id", "file_sha256")} for x in m["pool"]["models"]],
            "roles": m["tree"]["roles"], "max_turns": m.get("max_turns"), "samples": m["tree"]["samples"]}


def describe_recording(cfg: TrinityConfig) -> str | None:
    facts = recording_facts(cfg)
    if facts is None:
        return None
    first, last = (facts["recorded"] + [None, None])[:2]
    models = ", ".join(f"{x['name']} ({(x.get('file_sha256') or x.get('model_id') or '?')[:12]})"
                       for x in facts["models"])
    return (f"replayed from the recording `{facts['recording']}` ({facts['items']} items; real replies recorded "
            f"{(first or '?')[:10]} to {(last or '?')[:10]} by `trinity record`; K = {facts['max_turns']}, roles "
            f"{', '.join(facts['roles'])}; model files {models})")


FIXED_OUT_OF_SAMPLE = "fixed policy (chosen on train+validation)"
FIXED_HINDSIGHT = "bound: best prompt-independent policy (hindsight)"
PER_SUITE_HINDSIGHT = "bound: best per-suite policy (hindsight)"


def exact_item_values(cfg: TrinityConfig, ctx: Any, params: np.ndarray | None, items: Sequence[TaskItem], *,
                      choose_on: Sequence[TaskItem] = ()) -> dict[str, Any]:
    """Per-item expected rewards on the recording, no sampling noise: the trained coordinator (routed as
    configured, and by argmax), x0 (a zero head: uniform over agents and the configured roles, which is
    also the `random` method), every single model as the only Worker, and the recording's bounds
    (trinity.record.bounds): hindsight (every turn chosen knowing every reply), the best prompt-independent
    policy chosen on these same items and, with several suites, each suite's own (hindsight too, labelled
    so). With `choose_on` (the training and
    validation items) also the prompt-independent policy chosen THERE and scored on `items`: an honest
    baseline, out of sample, that a coordinator must beat. Returns {"items", "suites", "values": {name:
    per-item array}, "fixed_policy" (the out-of-sample one, else None), "fixed_policy_hindsight"}."""
    from trinity.coordinator.head import section_roles
    from trinity.record import bounds

    roles = section_roles(cfg.coordinator.roles)
    world = world_for(cfg, ctx.pool, roles)
    coord = ctx.routing_coordinator()
    evaluator = ExactEvaluator(coord, world, Fitness())
    compiled = world.compiled(items)
    routing = str(cfg.coordinator.routing)
    zero = np.zeros(coord.num_params)
    values: dict[str, np.ndarray] = {}
    tokens: dict[str, float] = {}
    if params is not None:
        mine = evaluator.value(params, items, routing)
        values["trinity"], tokens["trinity"] = mine.per_item, mine.tokens
        other = "argmax" if routing == "sample" else "sample"
        values[f"trinity:{other}"] = evaluator.value(params, items, other).per_item
    values["x0 (= random)"] = evaluator.value(zero, items, "sample").per_item
    single_tokens = {}
    for a, name in enumerate(world.agents):
        values[f"single:{name}"] = np.array([bounds.single_worker(c, a) for c in compiled])
        single_tokens[name] = float(np.mean([sum(o.weight * o.tokens
                                                 for o in c.states[0].actions.get((a, "worker"), ()))
                                             for c in compiled])) if compiled else float("nan")
    best_single = max(world.agents, key=lambda n: float(np.mean(values[f"single:{n}"]))) if world.agents else None
    if best_single is not None:
        tokens["best_single"] = single_tokens[best_single]
    tokens.update({f"single:{name}": t for name, t in single_tokens.items()})
    values["bound: hindsight"] = np.array([bounds.hindsight(c) for c in compiled])

    def best_fixed(on: list) -> tuple | None:
        fixed = bounds.fixed_policies(on, len(world.agents), roles, world.protocol.max_turns)
        return max(fixed, key=fixed.__getitem__) if fixed else None

    def describe(policy: tuple | None) -> str | None:
        return None if policy is None else " -> ".join(f"{world.agents[a]} as {r}" for a, r in policy)

    hindsight_policy = best_fixed(compiled)
    if hindsight_policy is not None:
        values[FIXED_HINDSIGHT] = np.array([bounds.follow(c, hindsight_policy) for c in compiled])
        suites = [it.suite for it in items]
        if len(set(suites)) > 1:
            values[PER_SUITE_HINDSIGHT], _ = bounds.fixed_per_group(compiled, suites, len(world.agents), roles,
                                                                    world.protocol.max_turns)
    chosen = best_fixed(world.compiled(list(choose_on))) if choose_on else None
    if chosen is not None:
        values[FIXED_OUT_OF_SAMPLE] = np.array([bounds.follow(c, chosen) for c in compiled])
        tokens[FIXED_OUT_OF_SAMPLE] = float(np.mean([bounds.follow_cost(c, chosen, "ktokens")
                                                     for c in compiled])) * 1000.0
    return {"items": [it.uid for it in items], "suites": [it.suite for it in items], "values": values,
            "fixed_policy": describe(chosen), "fixed_policy_hindsight": describe(hindsight_policy),
            "transfer_suites": [str(s) for s in cfg.tasks.transfer or []], "tokens": tokens}


def exact_values(cfg: TrinityConfig, ctx: Any, params: Sequence[np.ndarray], items: Sequence[TaskItem],
                 mode: str | None = None) -> list[ExactValue]:
    """Each parameter vector's exact expected values on `items` (routed as `mode`, default coordinator.routing),
    on one compilation of their trees."""
    from trinity.coordinator.head import section_roles

    world = world_for(cfg, ctx.pool, section_roles(cfg.coordinator.roles))
    evaluator = ExactEvaluator(ctx.routing_coordinator(), world, Fitness())
    return [evaluator.value(np.asarray(x, dtype=np.float64), items, mode or str(cfg.coordinator.routing))
            for x in params]
