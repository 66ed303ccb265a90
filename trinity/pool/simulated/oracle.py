"""Exact expected rewards of routings on a simulated profile, under the turn protocol.

What a coordinator can condition on: on the simulated pool every Worker appends the same reference
thought (replies.IDEA), so the transcript the coordinator reads on a turn is the item's prompt plus n
copies of it. Its routing is therefore a function of (suite, n) and nothing else: the turn index, the
answers and the verdicts are not visible. The **oracle** of a suite is the best deterministic routing
n -> (agent, role), found by exhaustive search (branch and bound) over every such routing, with the
exact expected terminal reward of each (belief propagation over the hidden state: no answer / right /
wrong, a pending Thinker suggestion, n). It is the reference line for argmax routing; sampled routing
draws from the same observation, and the report compares both with it.

Also computed exactly: every single model as the only Worker for one turn (the `single:<model>`
baseline), the best routing restricted to one agent, and uniformly random agent and role every turn
(the `random` baseline, which is also x0 = 0, the untrained coordinator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from trinity.pool.simulated.profile import SimulatedModel

ROLES = ("worker", "thinker", "verifier")
NONE, RIGHT, WRONG = 0, 1, 2          # answer state
State = tuple[int, str | None, int]   # (answer, pending suggested role, reference thoughts n)
Action = tuple[int, str]              # (agent index, role)


@dataclass(frozen=True)
class SuiteOracle:
    suite: str
    oracle: float                         # best deterministic routing n -> (agent, role)
    routing: tuple[tuple[int, str, str], ...]   # (n, agent name, role) of the oracle, for the n it reaches
    random: float                         # uniform agent and role every turn (= x0 = 0)
    single_worker: dict[str, float]       # one Worker turn by each model
    single_model: dict[str, float]        # best routing that only ever uses that model

    def to_dict(self) -> dict:
        return {"suite": self.suite, "oracle": self.oracle, "random": self.random,
                "routing": [{"thoughts": n, "agent": a, "role": r} for n, a, r in self.routing],
                "single_worker": self.single_worker, "single_model": self.single_model}


def _step(models: Sequence[SimulatedModel], suite: str, state: State, action: Action, mass: float,
          out: dict[State, float]) -> float:
    """Advance `mass` in `state` by one turn of `action`; alive mass goes into `out`; returns the
    reward collected now (an accepted right answer)."""
    answer, advice, n = state
    agent, router_role = action
    m = models[agent]
    role = advice or router_role
    if role == "worker":
        p = m.worker_accuracy(suite)
        _add(out, (RIGHT, None, n + 1), mass * p)
        _add(out, (WRONG, None, n + 1), mass * (1 - p))
        return 0.0
    if role == "thinker":
        v, w = m.thinker_valid, m.suggest_worker
        _add(out, (answer, "worker", n), mass * v * w)
        _add(out, (answer, "verifier", n), mass * v * (1 - w))
        _add(out, (answer, None, n), mass * (1 - v))
        return 0.0
    if answer == NONE:              # a Verifier before any answer ends the episode with reward 0
        return 0.0
    accept = m.accept_correct if answer == RIGHT else m.accept_wrong
    _add(out, (answer, None, n), mass * (1 - accept))
    return mass * accept if answer == RIGHT else 0.0


def _add(out: dict[State, float], state: State, mass: float) -> None:
    if mass > 0:
        out[state] = out.get(state, 0.0) + mass


def _final(belief: dict[State, float]) -> float:
    return sum(m for (answer, _, _), m in belief.items() if answer == RIGHT)


def policy_value(models: Sequence[SimulatedModel], suite: str, policy, max_turns: int) -> float:
    """Expected reward of `policy(n) -> [(weight, action), ...]` (a deterministic policy returns one
    action with weight 1)."""
    belief: dict[State, float] = {(NONE, None, 0): 1.0}
    reward = 0.0
    for _ in range(max_turns):
        nxt: dict[State, float] = {}
        for state, mass in belief.items():
            for weight, action in policy(state[2]):
                reward += _step(models, suite, state, action, mass * weight, nxt)
        belief = nxt
    return reward + _final(belief)


def best_routing(models: Sequence[SimulatedModel], suite: str, max_turns: int,
                 actions: Sequence[Action]) -> tuple[float, dict[int, Action]]:
    """The best deterministic n -> action over `actions`: depth-first over turns, choosing an action for
    each n the first time mass reaches it, pruned by the bound `collected + alive mass`."""
    best = [-1.0, {}]
    # try the most accurate Workers first so good routings (and tight bounds) come early
    order = sorted(actions, key=lambda a: (a[1] != "worker", -models[a[0]].worker_accuracy(suite)))

    def search(turn: int, belief: dict[State, float], collected: float, assigned: dict[int, Action]) -> None:
        if collected + sum(belief.values()) <= best[0] + 1e-12:
            return
        if turn == max_turns or not belief:
            value = collected + _final(belief)
            if value > best[0] + 1e-12:
                best[0], best[1] = value, dict(assigned)
            return
        missing = sorted({n for (_, _, n) in belief} - set(assigned))
        if missing:
            for action in order:
                search(turn, belief, collected, {**assigned, missing[0]: action})
            return
        nxt: dict[State, float] = {}
        gained = sum(_step(models, suite, s, assigned[s[2]], m, nxt) for s, m in belief.items())
        search(turn + 1, nxt, collected + gained, assigned)

    search(0, {(NONE, None, 0): 1.0}, 0.0, {})
    return best[0], best[1]


def suite_oracle(models: Sequence[SimulatedModel], suite: str, max_turns: int,
                 roles: Iterable[str] = ROLES) -> SuiteOracle:
    roles = [r for r in ROLES if r in set(roles)]
    actions = [(a, r) for a in range(len(models)) for r in roles]
    value, routing = best_routing(models, suite, max_turns, actions)
    uniform = [(1.0 / len(actions), a) for a in actions]
    single_model = {m.name: best_routing(models, suite, max_turns, [(i, r) for r in roles])[0]
                    for i, m in enumerate(models)}
    return SuiteOracle(
        suite=suite, oracle=value,
        routing=tuple((n, models[a].name, r) for n, (a, r) in sorted(routing.items())),
        random=policy_value(models, suite, lambda n: uniform, max_turns),
        single_worker={m.name: m.worker_accuracy(suite) for m in models},
        single_model=single_model,
    )


def profile_references(models: Sequence[SimulatedModel], suites: Sequence[str], max_turns: int,
                       roles: Iterable[str] = ROLES, weights: dict[str, float] | None = None) -> dict:
    """Per suite and pooled (weighted by `weights`, e.g. test items per suite; equal by default): the
    oracle, random routing, every single model. What reports draw as reference lines."""
    per = [suite_oracle(models, s, max_turns, roles) for s in suites]
    w = {s: float((weights or {}).get(s, 1.0)) for s in suites}
    total = sum(w.values()) or 1.0

    def pooled(get) -> float:
        return sum(w[o.suite] * get(o) for o in per) / total

    names = [m.name for m in models]
    return {
        "suites": [o.to_dict() for o in per],
        "pooled": {
            "oracle": pooled(lambda o: o.oracle), "random": pooled(lambda o: o.random),
            "single_worker": {n: pooled(lambda o, n=n: o.single_worker[n]) for n in names},
            "single_model": {n: pooled(lambda o, n=n: o.single_model[n]) for n in names},
            "weights": w,
        },
        "max_turns": max_turns,
    }
