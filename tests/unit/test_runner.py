"""The async runner: concurrency, order, isolation of failures, seeds, common random numbers."""

from __future__ import annotations

import asyncio

import pytest
from scripted_pool import RandomRouter, ScriptedPool, ScriptedRouter, stable_hash

from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.runner import EpisodeSpec, episode_seed, generation_specs, run_episodes
from trinity.episodes.trace import EpisodeId
from trinity.tasks.types import TaskItem

AGENTS = ["a", "b", "c"]
CFG = ProtocolConfig(max_turns=4, collaboration_instructions="Cooperate.", worker_system="W",
                     thinker_system="T", verifier_system="V")
ITEMS = [TaskItem(suite="toy", item_id=f"q{i}", prompt=f"What is {i}+{i}?", reference=str(2 * i)) for i in range(8)]


async def grade(item: TaskItem, answer: str) -> float:
    return 1.0 if item.reference in answer else 0.0


def deterministic_script():
    """Replies that depend only on the request, so concurrent episodes stay reproducible."""

    def worker(messages, sample_index):
        h = stable_hash(messages[1]["content"], sample_index)
        return f"maybe {h % 20} <idea>guess {h % 7}</idea>"

    def thinker(messages, sample_index):
        role = "worker" if stable_hash(messages[1]["content"], sample_index) % 2 else "verifier"
        return f"<suggestion>look again</suggestion><suggested_role>{role}</suggested_role>"

    def verifier(messages, sample_index):
        return "ACCEPT" if stable_hash(messages[1]["content"], sample_index) % 3 == 0 else "REJECT"

    return {"worker": worker, "thinker": thinker, "verifier": verifier}


def run(specs, pool, *, max_concurrency=64, grader=grade, progress=None):
    return asyncio.run(run_episodes(specs, pool, AGENTS, CFG, grader, max_concurrency=max_concurrency,
                                    progress=progress))


def test_episode_seed_is_stable_and_derived_from_the_whole_id():
    eid = EpisodeId(generation=2, candidate=5, item="toy/q1", repeat=1)
    assert episode_seed(0, eid) == episode_seed(0, EpisodeId(2, 5, "toy/q1", 1))
    assert episode_seed(0, eid) != episode_seed(1, eid)
    assert episode_seed(0, eid) != episode_seed(0, EpisodeId(2, 6, "toy/q1", 1))
    assert episode_seed(0, eid) != episode_seed(0, EpisodeId(2, 5, "toy/q1", 0))
    shared = episode_seed(0, eid, shared_across_candidates=True)
    assert shared == episode_seed(0, EpisodeId(2, 6, "toy/q1", 1), shared_across_candidates=True)


def test_generation_specs_are_candidate_major_with_stable_ids():
    routers = [RandomRouter(3), RandomRouter(3)]
    specs = generation_specs(7, 4, routers, ITEMS[:3], repeats=2)
    assert len(specs) == 12
    assert [s.episode_id.key() for s in specs[:3]] == ["g4/c0/toy/q0/r0", "g4/c0/toy/q0/r1", "g4/c0/toy/q1/r0"]
    assert specs[6].router is routers[1] and specs[6].episode_id.candidate == 1
    assert all(s.seed == episode_seed(7, s.episode_id) for s in specs)


def test_many_episodes_run_concurrently_in_spec_order():
    delay = 0.05
    # Later specs answer faster, so completion order differs from spec order.
    pool = ScriptedPool(CFG, {"worker": "answer", "thinker": "x", "verifier": "REJECT"},
                        delay_s=lambda model, sample_index: delay * (1 + (sample_index % 3)) / 2)
    specs = [EpisodeSpec.create(0, item, ScriptedRouter([(i % 3, "worker")] * 4), candidate=c)
             for c in range(6) for i, item in enumerate(ITEMS)]
    finished = []
    traces = run(specs, pool, max_concurrency=64, progress=lambda done, total, t: finished.append((done, total)))
    assert pool.count == 48 * 4
    # concurrent: the 48 episodes' calls overlapped (counted in the pool, not timed: a loaded machine slows a
    # timed check, never this count)
    assert pool.max_in_flight >= 32, pool.max_in_flight
    assert [t.episode.key() for t in traces] == [s.episode_id.key() for s in specs]
    assert [t.seed for t in traces] == [s.seed for s in specs]
    assert finished == [(i, 48) for i in range(1, 49)]


def test_max_concurrency_bounds_episodes_in_flight():
    pool = ScriptedPool(CFG, {"worker": "answer"}, delay_s=0.01)
    specs = [EpisodeSpec.create(0, item, ScriptedRouter([(0, "worker")] * 4), candidate=c)
             for c in range(3) for item in ITEMS]
    run(specs, pool, max_concurrency=5)
    assert pool.max_in_flight == 5
    with pytest.raises(ValueError):
        run(specs, pool, max_concurrency=0)


class BrokenRouter:
    async def choose(self, transcript, turn, rng):
        raise RuntimeError("feature service down")


def test_one_broken_episode_does_not_stop_the_others():
    async def fragile_grade(item, answer):
        if item.item_id == "q2":
            raise ZeroDivisionError("bad reference")
        return await grade(item, answer)

    pool = ScriptedPool(CFG, {"worker": "the answer is 2", "verifier": "ACCEPT"}, delay_s=0.005)
    good = [(0, "worker"), (1, "verifier")] + [(0, "worker")] * 2
    specs = [EpisodeSpec.create(0, item, ScriptedRouter(good)) for item in ITEMS[:4]]
    specs.insert(1, EpisodeSpec.create(0, ITEMS[5], BrokenRouter()))
    traces = run(specs, pool, grader=fragile_grade)
    broken = traces[1]
    assert broken.end_reason == "pool_failure" and broken.reward == 0.0 and broken.turns == []
    assert broken.error == "RuntimeError: feature service down"
    assert broken.episode == specs[1].episode_id
    assert traces[3].error == "grader: ZeroDivisionError: bad reference" and traces[3].reward == 0.0
    assert [t.end_reason for t in traces] == ["pool_failure" if t is broken else "accept" for t in traces]
    assert [t.reward for t in traces] == [0.0, 0.0, 1.0, 0.0, 0.0]   # q0, broken, q1, q2 (grader), q3
    assert traces[4].error is None and traces[4].graded


def test_turns_are_told_as_decided_and_each_episode_counts_max_turns_in_all():
    """on_turns: one per router decision while the episode plays; an episode ended early by a Verifier's
    ACCEPT (after 2 decisions) and one whose router fails (0 decisions) count the rest when they end."""
    pool = ScriptedPool(CFG, {"worker": "the answer is 2", "verifier": "ACCEPT"}, delay_s=0.001)
    told: list[tuple[int, int]] = []   # (n told, decisions made so far over all episodes)
    decided = 0

    class Counted(ScriptedRouter):
        async def choose(self, transcript, turn, rng):
            nonlocal decided
            decided += 1
            return await super().choose(transcript, turn, rng)

    accepting = [(0, "worker"), (1, "verifier")] + [(0, "worker")] * 2
    specs = [EpisodeSpec.create(0, ITEMS[1], Counted(accepting)),
             EpisodeSpec.create(0, ITEMS[3], Counted([(0, "worker")] * 4)),
             EpisodeSpec.create(0, ITEMS[5], BrokenRouter())]
    traces = asyncio.run(run_episodes(specs, pool, AGENTS, CFG, grade, max_concurrency=1,
                                      on_turns=lambda n: told.append((n, decided))))
    assert [t.end_reason for t in traces] == ["accept", "turn_limit", "pool_failure"]
    assert sum(n for n, _ in told) == len(specs) * CFG.max_turns
    # the accepted episode: its two decisions one by one, then the two turns it did not play at its end
    assert told[:3] == [(1, 1), (1, 2), (2, 2)]
    # the broken router decided nothing: its four turns come at its end
    assert told[-1] == (4, 6)


def test_rerun_reproduces_identical_traces():
    def fresh_specs(root):
        routers = [RandomRouter(len(AGENTS)) for _ in range(4)]
        return generation_specs(root, 1, routers, ITEMS, repeats=2)

    # Delays scramble completion order; they are reported as latency, so both runs use the same ones.
    def delay(model, sample_index):
        return (sample_index % 5) * 1e-3

    first = run(fresh_specs(11), ScriptedPool(CFG, deterministic_script(), delay_s=delay), max_concurrency=7)
    second = run(fresh_specs(11), ScriptedPool(CFG, deterministic_script(), delay_s=delay), max_concurrency=64)
    assert [t.to_dict() for t in first] == [t.to_dict() for t in second]
    reasons = {t.end_reason for t in first}
    assert len(reasons) >= 3 and {t.role_from_thinker for t in sum((t.turns for t in first), [])} == {True, False}
    other_root = run(fresh_specs(12), ScriptedPool(CFG, deterministic_script()))
    assert [t.to_dict() for t in other_root] != [t.to_dict() for t in first]


def test_candidates_share_sample_indices_so_identical_requests_share_calls():
    """Three candidates that route alike send identical requests (same sample indices): a response
    cache keyed on the request would make one real call for all three."""
    routers = [ScriptedRouter([(0, "worker"), (1, "thinker"), (2, "worker"), (0, "verifier")] * 2)
               for _ in range(3)]
    pool = ScriptedPool(CFG, deterministic_script())
    specs = generation_specs(0, 5, routers, ITEMS[:2], repeats=2)
    traces = run(specs, pool)
    per_candidate = {}
    for spec, trace in zip(specs, traces, strict=True):
        eid = spec.episode_id
        per_candidate.setdefault(eid.candidate, []).append(
            [(t.sample_index, t.role, t.agent) for t in trace.turns])
    assert per_candidate[0] == per_candidate[1] == per_candidate[2]
    requests = [(c.model, repr(c.messages), c.sample_index) for c in pool.calls]
    assert len(set(requests)) * 3 == len(requests)
    assert len({t.seed for t in traces}) == len(traces)   # router seeds still differ per candidate
