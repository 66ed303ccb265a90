"""Never below a constant policy (`evolve.constant_policy`): training on a recording never ends below the best
prompt-independent policy of the same training and validation items.

A head of (L + 3) x d numbers can learn a few dozen training items by heart and score below a policy that ignores
the prompt altogether: one (agent, role) per turn index, the same for every item ("qwen-python answers,
qwen-direct verifies, qwen-steps redoes"). The head cannot even express such a policy: it reads the transcript,
and after a rejected Verifier the transcript is the one the Verifier read, so the turn is unknown to it. So after
evolution, on a recording (exact expected values, no pool call), the kept coordinator is chosen on the validation
items among, simplest first:

1. `constant`: the best prompt-independent policy by reward on the training + validation items (the report's
   "fixed policy (chosen on train+validation)"), as a head with zero weights and a per-turn prior of logit
   CONSTANT_LOGIT for its agent and role (trinity.coordinator.layout): exp(-CONSTANT_LOGIT) underflows to 0,
   so its probabilities are exactly one-hot and it routes exactly as the policy under sampling and argmax alike;
2. `prior+<s>`: the evolved head plus that per-turn prior at logit s, for each `evolve.constant_policy.strengths` from
   the largest (nearest the constant policy) to the smallest: the head deviates from the policy only where its own
   logits differ by more than s;
3. `evolved`: the head evolution kept (`evolve.validation.select` over its validations).

The choice is `evolve.validation.select` (with its margin) over the candidates' validation scores in that order,
so a more fitted candidate must beat a simpler one as that rule asks (trinity.evolve.selection); a choice that
scores below the constant policy on validation is never kept (select_not_below). A score is the expected reward,
less `evolve.fitness.cost_weight` x the expected cost per episode (`cost_unit`) when the fitness has a cost
weight: the same trade-off evolution was trained for, and the constant policy is then chosen by it too.

The chosen candidate is saved as the coordinator (its per-turn prior inside its parameter vector, so
`trinity eval` and `trinity serve` route with it as evaluated here); every candidate is saved beside it
(`candidates/<name>.safetensors`) with its train and validation values in `candidates.json`, where the evaluate stage
adds each one's test value to the report.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.contracts import ROLES
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.config_schema import TrinityConfig
    from trinity.coordinator.coordinator import Coordinator
    from trinity.coordinator.layout import ParamLayout
    from trinity.pipeline.recorded import ExactEvaluator

log = logging.getLogger("trinity.evolve")

CONSTANT_LOGIT = 1000.0   # a logit lead whose softmax is exactly one-hot in float64 (exp(-1000) == 0.0)
SUMMARY_FILE = "candidates.json"
CANDIDATES = "candidates"


@dataclass(frozen=True)
class Candidate:
    name: str                  # constant | prior+<strength> | evolved
    kind: str                  # constant | prior | evolved
    strength: float | None     # the per-turn prior's logit (None: evolved, no prior)
    params: np.ndarray

    @property
    def file(self) -> str:
        return f"{self.name.replace('+', '_')}.safetensors"


def policy_bias(policy: Sequence[tuple[int, str]], n_agents: int, strength: float) -> np.ndarray:
    """A per-turn prior (turns, L + 3) with logit `strength` on each turn's agent and role of `policy`."""
    bias = np.zeros((len(policy), n_agents + len(ROLES)))
    for t, (agent, role) in enumerate(policy):
        bias[t, agent] = strength
        bias[t, n_agents + ROLES.index(role)] = strength
    return bias


def candidates(layout: ParamLayout, evolved: np.ndarray, policy: Sequence[tuple[int, str]],
               strengths: Sequence[float]) -> list[Candidate]:
    """The candidates, simplest first (module docstring)."""
    n_agents = layout.n_agents
    out = [Candidate("constant", "constant", CONSTANT_LOGIT,
                     layout.with_turn_bias(layout.zeros(), policy_bias(policy, n_agents, CONSTANT_LOGIT)))]
    for s in sorted({float(s) for s in strengths}, reverse=True):
        out.append(Candidate(f"prior+{s:g}", "prior", s,
                             layout.with_turn_bias(evolved, policy_bias(policy, n_agents, s))))
    out.append(Candidate("evolved", "evolved", None, layout.searched(evolved)))
    return out


def best_constant_policy(compiled: Sequence[Any], n_agents: int, roles: Sequence[str], max_turns: int, *,
                         cost_weight: float = 0.0, cost_unit: str = "usd") -> tuple[tuple[int, str], ...] | None:
    """The prompt-independent policy with the highest mean score on `compiled` (the first of equals, in the order
    trinity.record.bounds.fixed_policies lists them: with no cost weight the report's own choice)."""
    from trinity.record import bounds

    fixed = bounds.fixed_policies(compiled, n_agents, roles, max_turns)
    if not fixed:
        return None
    if cost_weight:
        fixed = {p: r - cost_weight * float(np.mean([bounds.follow_cost(c, p, cost_unit) for c in compiled]))
                 for p, r in fixed.items()}
    return max(fixed, key=fixed.__getitem__)


def choose_coordinator(cfg: TrinityConfig, exact: ExactEvaluator, coord: Coordinator, evolved: np.ndarray,
                       train: list[TaskItem], val: list[TaskItem], coordinator_dir: Path) -> dict[str, Any]:
    """Choose among the candidates on `val`, save the chosen one as the coordinator in `coordinator_dir` (keeping
    the metadata evolution saved it with, plus `constant_policy` and `candidate`), every candidate under `candidates/`,
    and `candidates.json`. `exact`: an ExactEvaluator on the recording (trinity.pipeline.recorded). Returns the
    summary."""
    from trinity.coordinator.saved import coordinator_file, load_saved
    from trinity.evolve.selection import Validated, select_not_below

    ev = cfg.evolve
    routing = str(cfg.coordinator.routing)
    weight, unit = float(ev.fitness.cost_weight), str(ev.fitness.cost_unit)
    world = exact.world
    policy = best_constant_policy(world.compiled(list(train) + list(val)), len(world.agents), coord.roles,
                                  world.protocol.max_turns, cost_weight=weight, cost_unit=unit)
    if policy is None or not val:
        return {"applied": False, "reason": "no training or validation items"}
    pool = list(candidates(coord.layout, evolved, policy, ev.constant_policy.strengths))
    rows: list[dict[str, Any]] = []
    history: list[Validated] = []
    for c in pool:
        on_train = exact.value(c.params, train, routing)
        on_val = exact.value(c.params, val, routing)
        score = np.asarray(on_val.per_item, dtype=np.float64) - weight * on_val.cost_per_item(unit)
        history.append(Validated(len(history), float(np.mean(score)), score))
        rows.append({"name": c.name, "kind": c.kind, "strength": c.strength, "file": f"{CANDIDATES}/{c.file}",
                     "train": round(on_train.reward, 6), "validation": round(on_val.reward, 6),
                     "train_tokens": round(on_train.tokens, 1), "validation_tokens": round(on_val.tokens, 1),
                     "validation_score": round(float(np.mean(score)), 6)})
    chosen = select_not_below(ev.validation.select.value, history, float(ev.validation.margin))
    summary = {"applied": True, "kept": pool[chosen].name, "routing": routing,
               "rule": ev.validation.select.value, "margin": float(ev.validation.margin),
               "cost_weight": weight, "cost_unit": unit,
               "policy": [{"turn": t, "agent": world.agents[a], "role": r} for t, (a, r) in enumerate(policy)],
               "policy_text": describe_policy(policy, world.agents),
               "train_items": len(train), "validation_items": len(val), "candidates": rows}
    coordinator_dir = Path(coordinator_dir)
    file = coordinator_file(coordinator_dir)
    _, saved, _ = load_saved(file)
    # what evolution saved the head with; a rerun over a finished run finds this choice's own keys there too
    meta = {k: v for k, v in saved.items() if k not in ("constant_policy", "candidate")}
    for c in pool:
        coord.save(coordinator_dir / CANDIDATES / c.file, c.params, {**meta, "candidate": c.name})
    coord.save(file, pool[chosen].params,
               {**meta, "constant_policy": {k: v for k, v in summary.items() if k != "candidates"},
                "candidate": pool[chosen].name})
    (coordinator_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    log.info("evolve: never below a constant policy (%s on validation): kept %s; %s", summary["rule"], summary["kept"],
             "; ".join(f"{r['name']} train {r['train']:.3f} validation {r['validation']:.3f}" for r in rows))
    return summary


def describe_policy(policy: Sequence[tuple[int, str]], agents: Sequence[str]) -> str:
    return " -> ".join(f"{agents[a]} as {r}" for a, r in policy)


def read_candidates(coordinator_dir: Path) -> dict[str, Any] | None:
    """The choice's summary saved beside a coordinator (None: evolution ran without it)."""
    path = Path(coordinator_dir) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else None
