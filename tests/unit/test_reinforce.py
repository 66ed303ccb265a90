"""REINFORCE on the routing head: the score-function gradient, learning on a scripted environment, the
on-policy interface (an update per generation's episodes, a repeated one harmless), and the evolution
loop's on-policy path (decisions recorded per episode, resumable like the ES path)."""

from __future__ import annotations

import numpy as np
import pytest
from coordinator_support import numeric_grad
from evolve_fixture import save_coordinator, toy_cfg

from trinity.contracts import ROLES
from trinity.coordinator.head import Decision, RoutingHead
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.errors import ConfigError
from trinity.evolve.evaluators import Evaluation, PerModeEvaluator, PopulationResult
from trinity.evolve.on_policy import EpisodeBatch, EpisodeDecisions
from trinity.evolve.strategy_registry import make_strategy
from trinity.seeding import rng as seeded_rng

N_AGENTS, D = 3, 5
ALL, NO_THINKER, NO_ROLES = ROLES, ("worker", "verifier"), ("worker",)


@pytest.mark.parametrize("roles", [ALL, NO_THINKER, NO_ROLES])
def test_log_prob_gradient_matches_finite_differences(roles):
    r = np.random.default_rng(0)
    w = r.normal(size=(N_AGENTS + 3, D))
    feature = r.normal(size=D)
    for agent, role in [(0, "worker"), (2, roles[-1]), (1, roles[0])]:
        analytic = RoutingHead(w, N_AGENTS, roles).log_prob_grad(feature, agent, role)
        numeric = numeric_grad(lambda x, agent=agent, role=role:   # runs in this iteration
                               RoutingHead(x, N_AGENTS, roles).log_prob(feature, agent, role), w)
        assert np.allclose(analytic, numeric, atol=1e-6), (roles, agent, role)
        for i, name in enumerate(ROLES):  # a role the head may not pick gets no gradient
            if name not in roles:
                assert not analytic[N_AGENTS + i].any()


def test_gradient_is_the_baselined_score_function():
    r = np.random.default_rng(1)
    w = r.normal(size=(N_AGENTS + 3, D))
    records = []
    for e in range(6):
        decisions = [Decision(r.normal(size=D), int(r.integers(N_AGENTS)), int(r.choice([0, 2])), (True, False, True))
                     for _ in range(1 + e % 3)]
        records.append(EpisodeDecisions(float(e % 2), decisions))
    method = make_strategy("reinforce", w.size, popsize=2)
    grad, baseline = method.gradient(w.ravel(), records)
    assert baseline == 0.5

    def surrogate(x: np.ndarray) -> float:  # 1/N sum (R - b) sum_t log pi(a_t | f_t)
        head = RoutingHead(x, N_AGENTS, NO_THINKER)
        return sum((rec.reward - baseline) * sum(head.log_prob(d.feature, d.agent, d.role) for d in rec.decisions)
                   for rec in records) / len(records)

    assert np.allclose(grad.reshape(w.shape), numeric_grad(surrogate, w), atol=1e-6)
    assert not grad.reshape(w.shape)[N_AGENTS + 1].any()  # thinker row untouched under no-thinker


def _scripted_episodes(params: np.ndarray, generation: int, candidates: int, episodes: int, roles=ALL):
    """Agent 0 always earns reward 1, every other agent 0; one turn per episode; features vary."""
    head = RoutingHead(params.reshape(N_AGENTS + 3, D), N_AGENTS, roles)
    out = []
    for c in range(candidates):
        rows = []
        for e in range(episodes):
            r = seeded_rng(7, "scripted", generation, c, e)
            feature = r.normal(size=D) + np.array([1.0, 0, 0, 0, 0])
            agent, role = head.choose(feature, r)
            rows.append((EpisodeDecisions(1.0 if agent == 0 else 0.0,
                                       [Decision(feature, agent, ROLES.index(role), tuple(head.role_mask))]), agent))
        out.append(rows)
    return out


def _p_agent0(params: np.ndarray) -> float:
    head = RoutingHead(params.reshape(N_AGENTS + 3, D), N_AGENTS)
    feats = seeded_rng(7, "probe").normal(size=(200, D)) + np.array([1.0, 0, 0, 0, 0])
    return float(np.mean([head.probabilities(f)[0][0] for f in feats]))


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("sgd", 0.5)])
def test_reinforce_raises_the_probability_of_the_rewarded_agent(optimizer, lr):
    n = (N_AGENTS + 3) * D
    method = make_strategy("reinforce", n, popsize=4, options={"learning_rate": lr, "optimizer": optimizer})
    state = method.init(np.zeros(n))
    start = _p_agent0(method.mean(state))
    for g in range(30):
        eps = _scripted_episodes(method.mean(state), g, method.popsize, 8)
        state, _ = method.update(state, EpisodeBatch(g, [rec for rows in eps for rec, _ in rows]))
    end = _p_agent0(method.mean(state))
    assert abs(start - 1 / 3) < 1e-9 and end > 0.6, (start, end)
    assert state.generation == 30 and method.describe(state) == {"learning_rate": lr}


def test_options_are_checked_and_svf_is_refused():
    with pytest.raises(ConfigError, match="evolve.reinforce.lr"):
        make_strategy("reinforce", 12, popsize=2, options={"lr": 0.1})
    with pytest.raises(ConfigError, match="evolve.reinforce.optimizer"):
        make_strategy("reinforce", 12, popsize=2, options={"optimizer": "lbfgs"})
    with pytest.raises(ConfigError, match="evolve.reinforce.learning_rate"):
        make_strategy("reinforce", 12, popsize=2, options={"learning_rate": 0})
    method = make_strategy("reinforce", 13, popsize=2)  # 13 is no (L + 3) x d head
    rec = EpisodeDecisions(1.0, [Decision(np.ones(2), 0, 0, (True, True, True))])
    with pytest.raises(ConfigError, match="head only"):
        method.update(method.init(np.zeros(13)), EpisodeBatch(0, [rec, EpisodeDecisions(0.0, rec.decisions)]))


def test_an_update_learns_once_per_generation():
    n = (N_AGENTS + 3) * D
    method = make_strategy("reinforce", n, popsize=2, options={"learning_rate": 0.1})
    start = method.init(np.zeros(n))
    batch = EpisodeBatch(0, [rec for rows in _scripted_episodes(method.mean(start), 0, 2, 6) for rec, _ in rows])
    once, _ = method.update(start, batch)
    assert once.generation == 1 and not np.array_equal(method.mean(once), method.mean(start))
    assert method.update(once, batch)[0] is once  # a repeated update of the same generation is harmless
    again, _ = method.update(start, batch)  # a pure function of the state and the episodes
    assert np.array_equal(method.mean(again), method.mean(once)) and np.array_equal(again.adam_v, once.adam_v)
    with pytest.raises(ValueError, match="generation 1, the episodes are from generation 5"):
        method.update(once, EpisodeBatch(5, batch.episodes))
    with pytest.raises(AttributeError):  # the state is a value: nothing can change it in place
        once.step = 7  # type: ignore[misc]


# ------------------------------------------------------------------ the evolution loop's on-policy path
class ScriptedOnPolicy:
    """evaluate_population for the loop: real Trace objects plus the recorded decisions per episode key."""

    def __init__(self, stop_at: int | None = None, episodes: int = 6):
        self.episodes, self.stop_at = episodes, stop_at
        self.record_calls = 0

    def traces(self, params, generation, candidate_count):
        eps = _scripted_episodes(np.asarray(params), generation, candidate_count, self.episodes)
        population, decisions = [], {}
        for c, rows in enumerate(eps):
            traces = []
            for e, (rec, agent) in enumerate(rows):
                ep = EpisodeId(generation, c, f"toy/{e}", 0)
                traces.append(Trace(ep, e, [Turn(0, f"m{agent}", agent, "worker", False)], final_answer="x",
                                    reward=rec.reward, end_reason="turn_limit"))
                decisions[ep.key()] = list(rec.decisions)
            population.append(traces)
        return PopulationResult(population, decisions=decisions)

    def evaluate_population(self, generation, candidates, keep_decisions=False):
        assert keep_decisions, "an on-policy method must ask for recorded decisions"
        if generation == self.stop_at:
            raise KeyboardInterrupt
        self.record_calls += 1
        return self.traces(candidates[0], generation, len(candidates))

    def evaluate_mean(self, generation, params, mode):
        return self.traces(params, 1000 + generation, 1).traces[0]


def _loop_cfg(tmp, generations: int):
    return toy_cfg(strategy="reinforce", generations=generations, popsize=3, every=2, episodes=6, tmp=tmp,
                   **{"evolve.reinforce": {"learning_rate": 0.05}})


def test_loop_runs_reinforce_on_recorded_decisions_and_resumes_identically(tmp_path):
    from trinity.pipeline.evolution_inputs import run_evolution_from_config

    n = (N_AGENTS + 3) * D

    def go(out, stop_at=None):
        env = ScriptedOnPolicy(stop_at)
        calls = Evaluation(population=env.evaluate_population, mean=PerModeEvaluator(env.evaluate_mean),
                           save_coordinator=save_coordinator)
        result = run_evolution_from_config(_loop_cfg(tmp_path, 6), n_params=n, evaluation=calls, out_dir=out)
        return result, env

    straight, env = go(tmp_path / "straight")
    assert env.record_calls == 6 and straight.generations_completed == 6
    assert _p_agent0(straight.final_mean) > 0.4  # from 1/3 in six steps
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path / "resumed", stop_at=3)  # interrupted inside generation 3 ...
    resumed, env2 = go(tmp_path / "resumed")  # ... resumed at its start
    assert env2.record_calls == 3 and resumed.resumed
    assert np.array_equal(resumed.final_mean, straight.final_mean)
