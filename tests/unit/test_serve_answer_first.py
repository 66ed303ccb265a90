"""serve.answer_first: no request ends without an answer while a Worker could still give one. Until a
Worker reply has visible text, the router never picks the Verifier, a Thinker's suggested Verifier
becomes a Worker (with the suggestion), and the last turn goes to a Worker. A scripted pool and a
steered head (plan[k] = the head's (agent, role) after k reference thoughts)."""

from __future__ import annotations

import asyncio

import pytest
from scripted_pool import ScriptedPool
from serve_support import AGENTS, serve_cfg, steered

from trinity.serve.request_episode import EpisodeRunner
from trinity.serve.schema import parse_chat_request
from trinity.serve.settings import ServeSettings

SUGGEST_VERIFIER = "<suggestion>check the units</suggestion><suggested_role>verifier</suggested_role>"
ANSWER = "The answer is 42. <idea>multiply</idea>"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return serve_cfg("http://127.0.0.1:9/v1", tmp_path_factory.mktemp("cache"))  # protocol.max_turns=4


def run(cfg, router, script, *, answer_first=True, max_turns=None, routing=None, seed=None):
    pool = ScriptedPool(cfg.protocol, script)
    runner = EpisodeRunner(pool, list(AGENTS), cfg.protocol, router, root_seed=0, answer_first=answer_first)
    body = {"model": "trinity", "messages": [{"role": "user", "content": "What is 6*7?"}],
            "trinity": {k: v for k, v in (("max_turns", max_turns), ("routing", routing)) if v is not None}}
    if seed is not None:
        body["seed"] = seed
    result = asyncio.run(runner.run(parse_chat_request(body, ServeSettings.from_config(cfg)), "req-af"))
    return result, pool


def roles(result) -> list[tuple[str, str]]:
    return [(t["agent"], t["role"]) for t in result.trace["turns"]]


def test_a_thinker_suggesting_the_verifier_before_any_answer_hands_the_turn_to_a_worker(cfg):
    router = steered([("alpha", "thinker"), ("beta", "verifier")])
    result, pool = run(cfg, router, {"thinker": SUGGEST_VERIFIER, "worker": ANSWER, "verifier": "ACCEPT"})
    assert roles(result) == [("alpha", "thinker"), ("alpha", "worker"), ("beta", "verifier")]
    thinker, worker = result.trace["turns"][:2]
    assert thinker["suggested_role"] == "verifier" and thinker["answer_first_override"]   # what it said
    assert worker["role_from_thinker"] and not worker["answer_first_override"]
    assert "check the units" in pool.calls[1].messages[-1]["content"]   # the suggestion reached the Worker
    assert result.answer == "The answer is 42." and result.trace["end_reason"] == "accept"


def test_a_thinker_suggesting_the_verifier_after_an_answer_is_followed(cfg):
    router = steered([("alpha", "worker"), ("beta", "thinker")])
    result, _ = run(cfg, router, {"thinker": SUGGEST_VERIFIER, "worker": ANSWER, "verifier": "ACCEPT"})
    assert roles(result) == [("alpha", "worker"), ("beta", "thinker"), ("beta", "verifier")]
    assert not any(t["answer_first_override"] for t in result.trace["turns"])


@pytest.mark.parametrize("max_turns", [1, 2, 4])
def test_the_last_turn_is_kept_for_a_worker_while_there_is_no_answer(cfg, max_turns):
    # a head that only ever wants a Thinker, whose replies are invalid (no tags: no role forced)
    router = steered([("gamma", "thinker")])
    result, _ = run(cfg, router, {"thinker": "Be careful with the units.", "worker": ANSWER}, max_turns=max_turns)
    assert roles(result) == [("gamma", "thinker")] * (max_turns - 1) + [("gamma", "worker")]
    assert result.answer == "The answer is 42." and result.trace["end_reason"] == "turn_limit"


def test_a_worker_reply_of_only_tags_is_not_yet_an_answer(cfg):
    # after the first reply (an idea, nothing else) the head wants beta to verify; it must work instead
    router = steered([("alpha", "worker"), ("beta", "verifier")])
    script = {"worker": ["<idea>multiply</idea>", ANSWER], "verifier": "ACCEPT"}
    result, _ = run(cfg, router, script)
    assert roles(result) == [("alpha", "worker"), ("beta", "worker"), ("beta", "verifier")]
    assert result.answer == "The answer is 42." and result.trace["answer_turn"] == 1


def test_without_answer_first_the_protocol_runs_exactly_as_trained(cfg):
    router = steered([("alpha", "thinker"), ("beta", "verifier")])
    result, pool = run(cfg, router, {"thinker": SUGGEST_VERIFIER}, answer_first=False)
    assert roles(result) == [("alpha", "thinker"), ("alpha", "verifier")]
    assert result.trace["end_reason"] == "verifier_before_answer" and not result.answer and pool.count == 1
    result, _ = run(cfg, steered([("gamma", "thinker")]), {"thinker": "hmm"}, answer_first=False, max_turns=2)
    assert roles(result) == [("gamma", "thinker")] * 2 and not result.answer
    assert result.trace["end_reason"] == "turn_limit"


def test_sampled_routing_never_ends_answerless_while_a_worker_could_answer(cfg):
    flat = steered([("alpha", "worker")])
    flat.head.weights[:] = 0.0   # uniform over models and roles: Thinkers and Verifiers come early and often
    script = {"thinker": SUGGEST_VERIFIER, "worker": ANSWER, "verifier": "REJECT"}
    for seed in range(40):
        result, _ = run(cfg, flat, script, routing="sample", seed=seed)
        assert result.answer and result.answer.startswith("The answer is 42."), (seed, roles(result))
        first_worker = next(i for i, (_, role) in enumerate(roles(result)) if role == "worker")
        assert all(role != "verifier" for _, role in roles(result)[:first_worker])
