"""Deterministic synthetic evaluations for the evolution tests, and a script the kill test runs.

The toy problem: each task item has a random feature vector; a linear head (the evolved params, one
row per agent) picks the agent with the largest logit; the reward is 1 when it picks the item's right
agent (the argmax of a hidden teacher head). Episodes are real Trace objects: one Worker turn, plus a
Verifier turn when the pick was wrong, with deterministic tokens, cost and cache hits. Validation routes
the mean by argmax or by sampling the softmax of the logits (a uniform draw per item, the same every
generation); `describe_mean` gives its routing matrix over two suites (even and odd items).

An on-policy method (REINFORCE) trains a routing head, agent rows then role rows ((3 + 3) x d; the toy
reads only the agent rows): its episodes sample agent and role from the head with a random stream per
(generation, candidate, item) and come with their recorded decisions. Black-box strategies see the
agent rows alone (3 x d), exactly as before on-policy methods had their own interface.

    python tests/evolve_fixture.py OUT_DIR [--marker-dir DIR] [--sleep S]
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES
from trinity.coordinator.head import Decision, RoutingHead
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.evolve.evaluators import Evaluation, Evaluator, PerModeEvaluator, PopulationResult
from trinity.evolve.strategy_registry import STRATEGIES
from trinity.seeding import derive_seed, rng

AGENTS = ("alpha", "beta", "gamma")


def toy_cfg(*, strategy: str = "sep_cma", generations: int = 6, popsize: int | None = 6, every: int | None = 2,
            patience: int | None = None, sigma0: float = 0.5, episodes: int = 8, seed: int = 3,
            tmp: Path | None = None, learning_rate: float = 0.05, **values: Any) -> TrinityConfig:
    """The toy problem's typed config: local_small's with the toy's pool, suite, evolve and paths sections (the
    rest at the schema's defaults); `values`: more dotted keys ("evolve.validation.select": "max"). `learning_rate`
    goes to an on-policy method (`evolve.<strategy>.learning_rate`): the code default is sized for the real
    head, far too slow for a few toy generations."""
    from trinity import config

    paths = {"metrics": str(tmp / "metrics"), "reports": str(tmp / "reports")} if tmp else {}
    own = {strategy: {"learning_rate": learning_rate}} if STRATEGIES[strategy].kind == "on_policy" else {}
    return config.with_values(_local_small(), {
        "seed": seed,
        "paths": paths,
        "protocol.max_turns": 3,
        "pool": {"models": {a: {} for a in AGENTS}},
        "coordinator": {},
        "tasks": {"train": ["toy"]},
        "evolve": {
            "strategy": strategy, "sigma0": sigma0, "popsize": popsize, "generations": generations,
            "episodes_per_candidate": episodes,
            "fitness": {"entropy_weight": 0.15, "turn_weight": 0.10, "cost_weight": 0.0, "cost_unit": "usd"},
            "validation": {"every": every, "n_items": 16}, "early_stop_patience": patience, "resume": True,
            "budget": {"max_cost_usd": None, "max_tokens": None, "max_calls": None}, **own,
        },
        **values,
    })


@functools.cache
def _local_small() -> TrinityConfig:
    from trinity import config

    return config.load(None, ["experiment=local_small"])   # the protocol's prompts, which the schema leaves empty


class ToyProblem:
    def __init__(self, cfg: TrinityConfig, *, n_features: int = 6, n_items: int = 64, sleep: float = 0.0,
                 marker_dir: Path | None = None) -> None:
        self.seed = int(cfg.seed)
        self.episodes = int(cfg.evolve.episodes_per_candidate)
        self.val_items = int(cfg.evolve.validation.n_items)
        self.sleep, self.marker_dir = sleep, marker_dir
        r = rng(self.seed, "toy-problem")
        self.features = r.standard_normal((n_items, n_features))
        teacher = r.standard_normal((len(AGENTS), n_features))
        self.targets = np.argmax(self.features @ teacher.T, axis=1)
        self.train_items = np.arange(n_items - self.val_items)
        self.valid_items = np.arange(n_items - self.val_items, n_items)
        self.n_features = n_features
        self.on_policy = STRATEGIES[str(cfg.evolve.strategy)].kind == "on_policy"
        self.n_params = (len(AGENTS) + (len(ROLES) if self.on_policy else 0)) * n_features

    def probabilities(self, params: np.ndarray, item: int) -> np.ndarray:
        z = params.reshape(-1, self.n_features)[: len(AGENTS)] @ self.features[item]
        z = np.exp(z - z.max())
        return z / z.sum()

    def pick(self, params: np.ndarray, item: int, mode: str = "argmax") -> int:
        p = self.probabilities(params, item)
        if mode == "argmax":
            return int(np.argmax(p))
        u = float(rng(self.seed, "toy-sample", item).random())
        return int(min(np.searchsorted(np.cumsum(p), u, side="right"), len(AGENTS) - 1))

    def suite(self, item: int) -> str:
        return "toy-even" if item % 2 == 0 else "toy-odd"

    def accuracy(self, params: np.ndarray, items: np.ndarray | None = None) -> float:
        items = self.train_items if items is None else items
        return float(np.mean([self.pick(params, i) == self.targets[i] for i in items]))

    def trace(self, params: np.ndarray, item: int, generation: int, candidate: int, mode: str = "argmax",
              agent: int | None = None) -> Trace:
        agent = self.pick(params, item, mode) if agent is None else agent
        # from a stream of its own per episode, like every random draw of a run (none from a global generator)
        latency = 0.5 + round(float(rng(self.seed, "toy-latency", generation, candidate, item, mode).random()), 6)
        right = agent == int(self.targets[item])
        turns = [Turn(0, AGENTS[agent], agent, "worker", False, prompt_tokens=100 + item, completion_tokens=20 + agent,
                      latency_s=latency, cost_usd=1e-6 * (120 + item), cached=(item + agent) % 3 == 0)]
        if not right:
            other = (agent + 1) % len(AGENTS)
            turns.append(Turn(1, AGENTS[other], other, "verifier", False, prompt_tokens=150, completion_tokens=5,
                              latency_s=0.25, cost_usd=2e-6, cached=item % 2 == 0, verdict="REJECT"))
        ep = EpisodeId(generation, candidate, f"toy/{item}", 0)
        return Trace(ep, derive_seed(self.seed, "episode", item), turns, final_answer=AGENTS[agent],
                     reward=1.0 if right else 0.0, end_reason="accept" if right else "turn_limit")

    def items_for(self, generation: int) -> np.ndarray:
        # Common random numbers: the items depend on the generation only, never on the candidate.
        return rng(self.seed, "items", generation).choice(self.train_items, self.episodes, replace=False)

    def evaluate_population(self, generation: int, candidates: list[np.ndarray],
                            keep_decisions: bool = False) -> PopulationResult:
        items = self.items_for(generation)
        out, decisions = [], {}
        for c, params in enumerate(candidates):
            if self.marker_dir is not None:
                (self.marker_dir / f"g{generation}_c{c}").touch()
            if self.sleep:
                time.sleep(self.sleep)
            if not keep_decisions:
                out.append([self.trace(params, int(i), generation, c) for i in items])
                continue
            head = RoutingHead(np.asarray(params).reshape(-1, self.n_features), len(AGENTS))
            traces = []
            for i in items:
                feature = self.features[int(i)]
                agent, role = head.choose(feature, rng(self.seed, "toy-policy", generation, c, int(i)))
                traces.append(self.trace(params, int(i), generation, c, agent=agent))
                decision = Decision(feature, agent, ROLES.index(role), tuple(head.role_mask))
                decisions[traces[-1].episode.key()] = [decision]
            out.append(traces)
        return PopulationResult(out, decisions=decisions)

    def evaluate_mean(self, generation: int, params: np.ndarray, mode: str) -> list[Trace]:
        if self.marker_dir is not None:
            (self.marker_dir / f"val_g{generation}_{mode}").touch()
        return [self.trace(params, int(i), -1, -1, mode) for i in self.valid_items]

    def describe_mean(self, generation: int, params: np.ndarray) -> dict:
        from trinity.evolve.diagnostics import routing_matrix

        items = [int(i) for i in self.valid_items]
        probs = np.array([self.probabilities(params, i) for i in items])
        return {"routing": routing_matrix([self.suite(i) for i in items], probs, AGENTS)}


def save_coordinator(path: Path, params: np.ndarray, meta: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "params.npy", params)
    (path / "meta.json").write_text(json.dumps(meta, sort_keys=True))


def evaluation(problem: ToyProblem, *, evaluate_population: Any = None, evaluate_mean: Any = None,
               **kw: Any) -> Evaluation:
    """The loop's Evaluation of the toy problem; `evaluate_population`, `evaluate_mean` (an Evaluator or a
    per-mode callable) and the other fields replace the problem's own."""
    mean = evaluate_mean or problem.evaluate_mean
    return Evaluation(population=evaluate_population or problem.evaluate_population,
                      mean=mean if isinstance(mean, Evaluator) else PerModeEvaluator(mean),
                      save_coordinator=save_coordinator, **{"describe_mean": problem.describe_mean, **kw})


def run(out_dir: Path, cfg: TrinityConfig, *, sleep: float = 0.0, marker_dir: Path | None = None,
        evaluate_population: Any = None, evaluate_mean: Any = None, train_reward: Any = None,
        x0: np.ndarray | None = None, sigma0: float | None = None, pictures: bool = False, **kw: Any):
    """The toy problem's evolution through run_evolution_from_config; `x0`, `sigma0`: a warm start. `pictures`:
    draw the run's PNGs (off: a toy run's tables are what the tests read, and drawing is most of a short run's
    final write; the tests of the PNGs turn it on)."""
    from trinity.evolve.loop import Start
    from trinity.pipeline.evolution_inputs import run_evolution_from_config

    problem = ToyProblem(cfg, sleep=sleep, marker_dir=marker_dir)
    calls = evaluation(problem, evaluate_population=evaluate_population, evaluate_mean=evaluate_mean,
                       train_reward=train_reward)
    return run_evolution_from_config(cfg, n_params=problem.n_params, evaluation=calls, out_dir=out_dir,
                                     start=None if x0 is None else Start(x0, sigma0), pictures=pictures, **kw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir", type=Path)
    p.add_argument("--marker-dir", type=Path)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--generations", type=int, default=6)
    args = p.parse_args(argv)
    cfg = toy_cfg(generations=args.generations, tmp=args.out_dir.parent)
    result = run(args.out_dir, cfg, sleep=args.sleep, marker_dir=args.marker_dir)
    print(json.dumps({"stop_reason": result.stop_reason, "generations": result.generations_completed}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
