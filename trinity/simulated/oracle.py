"""Exact expected rewards of routings on a simulated profile, under the turn protocol.

What a coordinator can condition on: on the simulated pool every Worker appends the same reference
thought (replies.IDEA), so the transcript the coordinator reads on a turn is the item's prompt plus n
copies of it. Its routing is therefore a function of (suite, n) and nothing else: the turn index, the
answers and the verdicts are not visible.

The **best deterministic policy (oracle)** of a suite is the best routing n -> (agent, role), found by
exhaustive search (branch and bound) over every such routing, with the exact expected terminal reward
of each (belief propagation over the hidden state: no answer / right / wrong, a pending Thinker
suggestion, n). In expectation it bounds argmax routing, which is such a deterministic function, and
nothing else. It does NOT bound sampled routing: n stays the same across a Thinker turn or a rejected
Verifier turn, so one observation can recur within an episode, the expected reward is not multilinear
in the choice probabilities, and a randomised choice can beat every deterministic one (on
`complementary`, K = 5, mixing Worker and Verifier half and half once two answers exist is worth 0.865
against the oracle's 0.859; tests/unit/test_simulated_oracle.py). And a reward measured on a finite set of
items is one draw of the outcomes, which can land above any expectation.

The **hindsight bound** is the upper bound for any routing, sampled or not, deterministic or not, seeing
anything: per item, the best reward any sequence of choices could reach knowing every simulated outcome
in advance. A reward of 1 needs a scored answer that is right, and every answer is some Worker call's
reply, whose rightness is drawn once per (model, item, sample index) and the sample index is fixed by
(item, repeat, turn) (episodes.protocol.sample_index_for). So on an item's realised outcomes no routing
can score 1 unless some model's Worker draw at some turn is right (`realised_hindsight`); and when the
coordinator may choose Worker and Verifier (the default roles) the bound is reached: Workers up to that
turn, that model as Worker there, Verifiers after it (an accept scores the right answer, a rejection
keeps it). Its expectation, P(at least one of the L x K Worker draws is right) = 1 - prod_m (1 - p_m)^K,
is `hindsight`; it bounds every routing's expected reward. Why not the expected reward of the best
adaptive choice given what each turn reveals (a fully observed MDP): it bounds expected rewards of
non-clairvoyant routings only, and a measured mean (one draw of the outcomes) can exceed it, as
measured rewards exceed the oracle; the realised hindsight bound cannot be exceeded by any measurement.

Also computed exactly: every single model as the only Worker for one turn (the `single:<model>`
baseline), the best routing restricted to one agent, and uniformly random agent and role every turn
(the `random` baseline, which is also x0 = 0, the untrained coordinator).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trinity.contracts import ROLES
from trinity.simulated.profile import SimulatedModel, worker_right

NONE, RIGHT, WRONG = 0, 1, 2          # answer state
State = tuple[int, str | None, int]   # (answer, pending suggested role, reference thoughts n)
Action = tuple[int, str]              # (agent index, role)


@dataclass(frozen=True)
class SuiteOracle:
    suite: str
    oracle: float                         # best deterministic routing n -> (agent, role): not a bound for sampling
    routing: tuple[tuple[int, str, str], ...]   # (n, agent name, role) of the oracle, for the n it reaches
    hindsight: float                      # expected hindsight bound: no routing's expected reward exceeds it
    random: float                         # uniform agent and role every turn (= x0 = 0)
    single_worker: dict[str, float]       # one Worker turn by each model
    single_model: dict[str, float]        # best routing that only ever uses that model

    def to_dict(self) -> dict:
        return {"suite": self.suite, "oracle": self.oracle, "hindsight": self.hindsight, "random": self.random,
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
    best: list[Any] = [-1.0, {}]  # [value, routing]
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


def hindsight(models: Sequence[SimulatedModel], suite: str, max_turns: int) -> float:
    """The expected hindsight bound (module doc): P(some model's Worker draw is right at some turn), the
    draws independent across (model, turn) (two turns share a sample index, hence a draw, with
    probability 2^-16: ignored)."""
    all_wrong = 1.0
    for m in models:
        all_wrong *= (1.0 - m.worker_accuracy(suite)) ** max_turns
    return 1.0 - all_wrong


def realised_hindsight(models: Sequence[SimulatedModel], item_uid: str, suite: str, samples: Sequence[int],
                       outcome_seed: int = 0) -> float:
    """The hindsight bound of one item on its realised outcomes: 1.0 when some model's Worker answer at
    one of the episode's sample indices (`samples[t]` for turn t, episodes.protocol.sample_index_for) is
    right under the run's `outcome_seed`, else 0.0. No routing scores the item above it."""
    return float(any(worker_right(m, item_uid, suite, s, outcome_seed) for s in samples for m in models))


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
        hindsight=hindsight(models, suite, max_turns),
        random=policy_value(models, suite, lambda n: uniform, max_turns),
        single_worker={m.name: m.worker_accuracy(suite) for m in models},
        single_model=single_model,
    )


def profile_references(models: Sequence[SimulatedModel], suites: Sequence[str], max_turns: int,
                       roles: Iterable[str] = ROLES, weights: dict[str, float] | None = None) -> dict:
    """Per suite and pooled (weighted by `weights`, e.g. test items per suite; equal by default): the
    best deterministic policy (oracle), the expected hindsight bound, random routing, every single model.
    What reports draw as reference lines."""
    per = [suite_oracle(models, s, max_turns, roles) for s in suites]
    w = {s: float((weights or {}).get(s, 1.0)) for s in suites}
    total = sum(w.values()) or 1.0

    def pooled(get) -> float:
        return sum(w[o.suite] * get(o) for o in per) / total

    names = [m.name for m in models]
    return {
        "suites": [o.to_dict() for o in per],
        "pooled": {
            "oracle": pooled(lambda o: o.oracle), "hindsight": pooled(lambda o: o.hindsight),
            "random": pooled(lambda o: o.random),
            "single_worker": {n: pooled(lambda o, n=n: o.single_worker[n]) for n in names},
            "single_model": {n: pooled(lambda o, n=n: o.single_model[n]) for n in names},
            "weights": w,
        },
        "max_turns": max_turns,
    }
