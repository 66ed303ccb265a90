"""Checking Verifiers and redo setups (trinity.episodes.checks, trinity.pool.agents): a code check rejects a
wrong answer by a failing example of the statement and accepts a right one, in the real sandbox, seeing
only the task and the answer; a re-solve check compares final answers; two checking setups of one model send
different Verifier requests; a fresh or anew redo never sees the rejected answer; and recording a changed
setup calls the pool only for the nodes the recording lacks."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from pool_stub import StubServer, stub_pool_cfg
from recording_support import grade, recording_cfg, reply_for, write_prepared

from trinity.config import with_values
from trinity.config_schema.pool import AgentSetup
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes import checks
from trinity.episodes.checks import PROCEDURES, statement_examples, task_kind
from trinity.episodes.protocol import turn_context
from trinity.pool.agents import CHECKS, TurnContext, agent_request, recorded_request
from trinity.pool.client import PoolClient
from trinity.pool.providers import resolve_endpoint
from trinity.pool.types import CallResult
from trinity.pool.verify_layer import CheckCall
from trinity.record.tree import request_hash
from trinity.tasks.types import TaskItem

TASK = '''Complete the following Python function.

```python
def add_one(xs):
    """Add one to every number of the list.
    >>> add_one([1, 2])
    [2, 3]
    >>> add_one([])
    []
    """
```
'''
RIGHT = "```python\ndef add_one(xs):\n    return [x + 1 for x in xs]\n```"
WRONG = "```python\ndef add_one(xs):\n    return [x + 2 for x in xs]\n```"
MC_TASK = "Which is a prime?\n\nA. 4\nB. 7\nC. 9\nD. 12\n\nEnd with 'The answer is X'."


def _context(task: str, answer: str, rejection: str | None = None) -> TurnContext:
    cfg = ProtocolConfig()
    return turn_context(cfg, TaskItem("s", "i", task, {"hidden": "never shown"}), answer, rejection, 0)


def _verdict(name: str, task: str, answer: str, ask=None) -> tuple[str, list[CallResult]]:
    async def no_call(*_a, **_k):
        raise AssertionError("this check must not call the pool")

    return asyncio.run(PROCEDURES[name](CheckCall("m", _context(task, answer), ask or no_call)))


def test_every_named_check_has_a_procedure():
    assert set(PROCEDURES) == set(CHECKS)


def test_the_statement_examples_are_read_and_the_kind_of_task_known():
    assert [(c.source, c.expected) for c in statement_examples(TASK)] == [("add_one([1, 2])", "[2, 3]"),
                                                                       ("add_one([])", "[]")]
    assert task_kind(TASK) == "code" and task_kind(MC_TASK) == "choice" and task_kind("What is 3 + 4?") == "answer"


def test_a_code_check_rejects_a_wrong_answer_by_a_failing_example_and_accepts_a_right_one():
    text, calls = _verdict("resolve", TASK, WRONG)
    assert text.startswith("REJECT") and "add_one([1, 2]) == [2, 3]" in text and "got [3, 4]" in text
    assert calls == []
    text, _ = _verdict("resolve", TASK, RIGHT)
    assert text.startswith("ACCEPT") and "2 example" in text


def test_a_code_check_sees_only_the_statement_not_the_hidden_tests():
    # the item's reference holds tests the answer would fail; the context the check reads has no reference
    ctx = _context(TASK, RIGHT)
    assert "never shown" not in repr(ctx)
    text, _ = _verdict("resolve", TASK, RIGHT)
    assert text.startswith("ACCEPT")


BARE_TASK = TASK.replace("    >>> add_one([1, 2])\n    [2, 3]\n    >>> add_one([])\n    []\n", "")


def test_written_tests_are_asked_only_without_statement_examples_and_a_failing_one_rejects():
    asked: list[list[dict]] = []

    async def ask(model, messages, **kw):
        asked.append(messages)
        assert kw["role"] is None   # a call outside the turn protocol: no setup instructions
        # a server that continues the begun reply sends only the rest of it
        return CallResult(model=model, text="[5]) == [6]\nassert add_one([0]) == [1]\n```",
                          ok=True, prompt_tokens=30, completion_tokens=12)

    text, calls = _verdict("resolve_tests", TASK, RIGHT, ask)   # the statement's own examples suffice
    assert text.startswith("ACCEPT") and "2 example" in text and calls == [] and asked == []
    text, calls = _verdict("resolve_tests", BARE_TASK, RIGHT, ask)
    assert text.startswith("ACCEPT") and "2 example" in text and len(calls) == 1
    broken = "```python\ndef add_one(xs):\n    return [x + 1 for x in xs] if xs != [0] else [0]\n```"
    text, _ = _verdict("resolve_tests", BARE_TASK, broken, ask)
    assert text.startswith("REJECT") and "add_one([0]) == [1]" in text
    assert all(m[-1] == {"role": "assistant", "content": "```python\nassert add_one("} for m in asked)
    assert all(RIGHT not in m[-2]["content"] and broken not in m[-2]["content"] for m in asked)
    assert _verdict("resolve", BARE_TASK, broken)[0].startswith("ACCEPT: nothing to run")


def test_a_whole_test_writing_reply_reads_as_well_as_a_continued_one():
    whole = "```python\nassert add_one([5]) == [6]\nassert add_one([0]) == [1]\n```"
    rest = "[5]) == [6]\nassert add_one([0]) == [1]\n```"
    assert checks.written_tests(whole, "add_one") == checks.written_tests(rest, "add_one")
    assert [c.source for c in checks.written_tests(rest, "add_one")] == ["assert add_one([5]) == [6]",
                                                                         "assert add_one([0]) == [1]"]


def test_a_resolving_check_compares_final_answers():
    async def ask_b(model, messages, **kw):
        assert kw["role"] == "worker" and "Which is a prime?" in messages[-1]["content"]
        return CallResult(model=model, text="Seven is prime. The answer is B", ok=True, completion_tokens=9)

    text, calls = _verdict("resolve", MC_TASK, "Nine. The answer is C", ask_b)
    assert text == "REJECT: solving it anew gives B, not C." and calls[0].completion_tokens == 9
    text, _ = _verdict("resolve", MC_TASK, "The answer is B", ask_b)
    assert text.startswith("ACCEPT")

    async def ask_number(model, messages, **kw):
        return CallResult(model=model, text="so the total is \\boxed{42}", ok=True)

    assert _verdict("resolve", "What is 6 * 7?", "The answer is 41.", ask_number)[0].startswith("REJECT")
    assert _verdict("resolve", "What is 6 * 7?", "The answer is 42.", ask_number)[0].startswith("ACCEPT")


def test_a_failed_resolve_is_a_failed_verifier_call_not_a_verdict():
    async def fails(model, messages, **kw):
        return CallResult(model=model, text="", ok=False, error="http 500")

    text, calls = _verdict("resolve", MC_TASK, "The answer is B", fails)
    assert text == "" and not calls[0].ok


def test_a_hostile_answer_under_review_is_contained(tmp_path, monkeypatch):
    target = tmp_path / f"escaped-{uuid.uuid4().hex}"
    hostile = (f"```python\nimport os\nopen({str(target)!r}, 'w').write('x')\nos.system('touch {target}')\n"
               "def add_one(xs):\n    return [x + 1 for x in xs]\n```")
    text, _ = _verdict("resolve", TASK, hostile)
    assert not target.exists()
    assert text.startswith("REJECT")
    spin = "```python\ndef add_one(xs):\n    while True:\n        pass\n```"
    # a spinning program runs until the CPU limit kills it: one CPU-second shows it as well as the checks' five
    monkeypatch.setattr(checks, "CHECK_LIMITS", dataclasses.replace(checks.CHECK_LIMITS, cpu_s=1))
    text, _ = _verdict("resolve", TASK, spin)
    assert text.startswith("REJECT") and "did not finish" in text


def _endpoint(setup: dict):
    pool = stub_pool_cfg("http://127.0.0.1:9/v1", models={"a": {"setup": setup}})
    return resolve_endpoint("a", pool.models["a"], pool)


def test_two_checking_setups_of_one_model_send_different_verifier_requests():
    messages = [{"role": "system", "content": "You are the Verifier."}, {"role": "user", "content": "Task: x"}]
    keys = {name: request_hash(*recorded_request(_endpoint({"verify": name}), "verifier", messages, 64, 0.1))
            for name in (None, "resolve", "resolve_tests")}
    assert len(set(keys.values())) == 3


def test_a_checking_verifier_is_known_by_its_procedure_and_version(monkeypatch):
    from trinity.pipeline.record_stage import setups_digest
    from trinity.pool import agents

    messages = [{"role": "system", "content": "You are the Verifier."}, {"role": "user", "content": "Task: x"}]
    pool = {"models": {"a": {"setup": {"verify": "resolve"}}, "b": {"setup": {"redo": "anew"}}}}
    before = request_hash(*recorded_request(_endpoint({"verify": "resolve"}), "verifier", messages, 64, 0.1))
    digest, plain = setups_digest(pool), setups_digest({"models": {"b": {"setup": {"redo": "anew"}}}})
    assert agents.verify_procedure(agents.verify_tool("resolve_tests")) == "resolve_tests"
    monkeypatch.setattr(agents, "CHECKS_VERSION", agents.CHECKS_VERSION + 1)
    # a new version is a new request (nothing recorded before is replayed as its verdict) and makes the items
    # recorded with a checking Verifier stale; a pool without one is not touched
    assert request_hash(*recorded_request(_endpoint({"verify": "resolve"}), "verifier", messages, 64, 0.1)) != before
    assert setups_digest(pool) != digest and setups_digest({"models": {"b": {"setup": {"redo": "anew"}}}}) == plain


def test_a_fresh_or_anew_redo_never_sees_the_rejected_answer():
    cfg = ProtocolConfig()
    rejected = "The answer is 13 <idea>add the tens first</idea>"
    shared = [{"role": "system", "content": cfg.worker_system},
              {"role": "user", "content": "What is 6 + 7?\n\nReference thought 1:\nadd the tens first"}]
    ctx = _context("What is 6 + 7?", rejected, rejection="solving it anew gives 13, not 12")
    fresh = agent_request(AgentSetup(redo="fresh"), "worker", shared, 64, ctx).messages
    anew = agent_request(AgentSetup(redo="anew"), "worker", shared, 64, ctx).messages
    kept = agent_request(AgentSetup(), "worker", shared, 64, ctx).messages
    assert "add the tens first" in kept[-1]["content"]
    for messages in (fresh, anew):
        assert "add the tens first" not in messages[-1]["content"] and "13 <idea>" not in messages[-1]["content"]
    assert "solving it anew gives 13, not 12" in fresh[-1]["content"]
    assert anew == list(ctx.fresh)   # the request of the agent's first turn
    # no REJECT before this turn: every setup sends the shared transcript
    assert agent_request(AgentSetup(redo="anew"), "worker", shared, 64, _context("What is 6 + 7?", rejected)
                         ).messages == shared


def test_an_unknown_redo_mode_or_check_is_refused():
    from trinity.errors import ConfigError
    from trinity.pool.errors import PoolConfigError

    with pytest.raises(ConfigError, match="redo"):
        AgentSetup(redo="sometimes").check("pool.models.a.setup")
    with pytest.raises(PoolConfigError, match="unknown checking procedure"):
        _endpoint({"verify": "vibes"})


def test_recording_a_changed_setup_calls_only_for_the_new_nodes(tmp_path):
    from trinity.pipeline import record_stage
    from trinity.record import store

    write_prepared(tmp_path / "prepared", {"train": 2, "validation": 1, "test": 1})
    with StubServer(reply_for) as server:
        cfg = recording_cfg(tmp_path, server.base_url, roles=("worker", "verifier"), max_turns=3,
                            items={"train": 2, "validation": 1, "test": 1})

        def factory(journal, known):
            return PoolClient.from_config(cfg.pool, cache_path=journal, replay=known, procedures=PROCEDURES)

        record_stage.run(cfg, progress=lambda _l: None, grader=grade, client_factory=factory)
        first = server.count
        root = record_stage.recording_dir(cfg)
        (root / store.JOURNAL).unlink()   # the journal is not part of the dataset: a fresh clone has none
        # the same tree again: nothing to record
        assert record_stage.run(cfg, progress=lambda _l: None, grader=grade, client_factory=factory)["pending"] == 0
        assert server.count == first
        # one agent checks by re-solving instead of reading, and redoes anew: its re-solve is its own first-turn
        # request, which the recording holds, so no pool call is made at all
        cfg = with_values(cfg, {"pool.models.m-mid.setup": {"verify": "resolve", "redo": "anew"}})
        # stopped after two items, the other two stay stale (the manifest now names the new setups)
        out = record_stage.run(cfg, progress=lambda _l: None, grader=grade, client_factory=factory, limit_items=2)
        assert out["recorded"] == 2 and len(record_stage.stale_items(cfg)) == 2
        out = record_stage.run(cfg, progress=lambda _l: None, grader=grade, client_factory=factory)
        assert out["recorded"] == 2 and out["new_calls"] == 0 and server.count == first
        nodes = store.open_recording(root).nodes
        checked = nodes.filter((nodes["model"] == "m-mid") & (nodes["role"] == "verifier"))
        assert checked.height > 0 and all(r.startswith(("ACCEPT: solving", "REJECT: solving"))
                                          for r in checked["reply"].to_list())
        # a fresh redo (the task and the Verifier's reason) is a new request: only those are sent
        cfg = with_values(cfg, {"pool.models.m-mid.setup": {"verify": "resolve", "redo": "fresh"}})
        stale = record_stage.stale_items(cfg)
        assert len(stale) == 4
        foreseen = record_stage.new_calls_of(cfg, stale)   # the dry run sends nothing
        assert server.count == first
        out = record_stage.run(cfg, progress=lambda _l: None, grader=grade, client_factory=factory)
        new_bodies = [r.json for r in server.requests[first:]]
        assert out["new_calls"] == len(new_bodies) == foreseen > 0
        assert record_stage.stale_items(cfg) == []
        assert all(b["model"] == "m-mid-id" and "A verifier rejected an earlier answer" in b["messages"][-1]["content"]
                   for b in new_bodies)
