"""Code grades are remembered per (suite, item, program): a repeated reply does not run the sandbox again."""

import asyncio
import threading
import time

import pytest

from trinity.sandbox import SandboxResult
from trinity.tasks import get_suite
from trinity.tasks.graders import code as code_grader
from trinity.tasks.graders.code import GradeCache
from trinity.tasks.types import TaskItem

PROMPT = 'def add(a, b):\n    """Sum of a and b."""\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def _item(item_id="HumanEval/add"):
    return TaskItem(suite="humaneval", item_id=item_id, prompt=PROMPT,
                    reference={"prompt": PROMPT, "test": TEST, "entry_point": "add"})


def _reply(body="return a + b"):
    return f"```python\ndef add(a, b):\n    {body}\n```"


@pytest.fixture
def runs(monkeypatch):
    """Counts sandbox runs; every run passes unless `outcome` says otherwise."""
    state = {"calls": 0, "outcome": dict(returncode=0, timed_out=False, completed=True), "delay_s": 0.0}

    def fake_run_python(program, *, limits, stdin=None):
        state["calls"] += 1
        time.sleep(state["delay_s"])
        return SandboxResult(stdout="", stderr="", isolation="fake", **state["outcome"])

    monkeypatch.setattr(code_grader, "run_python", fake_run_python)
    monkeypatch.setattr("trinity.tasks.suites_code.PROGRAM_GRADES", GradeCache(maxsize=16))
    return state


def test_repeated_reply_runs_the_sandbox_once(runs):
    suite = get_suite("humaneval")
    assert asyncio.run(suite.grade(_item(), _reply())) == 1.0
    assert asyncio.run(suite.grade(_item(), _reply())) == 1.0
    assert runs["calls"] == 1
    # the same program in other words around it is the same program
    assert asyncio.run(suite.grade(_item(), "Sure:\n" + _reply() + "\nDone.")) == 1.0
    assert runs["calls"] == 1
    asyncio.run(suite.grade(_item(), _reply("return b + a")))
    assert runs["calls"] == 2
    asyncio.run(suite.grade(_item("HumanEval/add-2"), _reply()))
    assert runs["calls"] == 3


def test_a_new_suite_object_shares_the_cache(runs):
    asyncio.run(get_suite("humaneval").grade(_item(), _reply()))
    asyncio.run(get_suite("humaneval").grade(_item(), _reply()))
    assert runs["calls"] == 1


def test_a_timeout_is_graded_again_until_it_came_twice(runs):
    """A timeout may be load: graded again; the same program timing out a second time is remembered (a runaway
    program would otherwise cost the time limit at every grading)."""
    suite = get_suite("humaneval")
    runs["outcome"] = dict(returncode=None, timed_out=True, completed=False)
    for _ in range(4):
        grade = asyncio.run(suite.grade_detail(_item(), _reply()))
        assert grade.score == 0.0 and grade.error == "timeout"
        assert not grade.repeatable        # the episode's memo above keeps treating it as a timeout
    assert runs["calls"] == code_grader.TIMEOUT_STRIKES == 2
    # another program, or the same on another item, has its own count
    asyncio.run(suite.grade_detail(_item(), _reply("return b + a")))
    asyncio.run(suite.grade_detail(_item("HumanEval/add-2"), _reply()))
    assert runs["calls"] == 4


def test_a_timeout_then_a_pass_is_the_pass(runs):
    suite = get_suite("humaneval")
    runs["outcome"] = dict(returncode=None, timed_out=True, completed=False)
    assert asyncio.run(suite.grade(_item(), _reply())) == 0.0
    runs["outcome"] = dict(returncode=0, timed_out=False, completed=True)   # the load went away
    assert asyncio.run(suite.grade(_item(), _reply())) == 1.0
    assert asyncio.run(suite.grade(_item(), _reply())) == 1.0
    assert runs["calls"] == 2


def test_refused_values_are_remembered_after_the_strikes_only(runs):
    cache = GradeCache(maxsize=4, strikes=3)
    seen = []

    async def scenario():
        for _ in range(5):
            seen.append(await cache.get("k", lambda: len(seen), keep=lambda v: False))

    asyncio.run(scenario())
    assert seen == [0, 1, 2, 2, 2]       # computed three times, then the third value is remembered
    cache.clear()
    asyncio.run(scenario())
    assert seen[5:] == [5, 6, 7, 7, 7]   # clear forgets the counts too


def test_failures_are_remembered_with_their_reason(runs):
    suite = get_suite("humaneval")
    runs["outcome"] = dict(returncode=0, timed_out=False, completed=False)
    for _ in range(2):
        grade = asyncio.run(suite.grade_detail(_item(), _reply()))
        assert grade.score == 0.0 and grade.error == "exited before its tests finished"
    assert runs["calls"] == 1


def test_concurrent_identical_grades_share_one_run(runs):
    suite = get_suite("humaneval")
    runs["delay_s"] = 0.3

    async def many():
        return await asyncio.gather(*(suite.grade(_item(), _reply()) for _ in range(5)))

    scores = []
    threads = [threading.Thread(target=lambda: scores.extend(asyncio.run(many()))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert scores == [1.0] * 10
    assert runs["calls"] == 1


def test_cache_is_bounded_and_errors_are_not_kept():
    cache = GradeCache(maxsize=2)
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return value
        return run

    async def scenario():
        for key in ("a", "b", "a", "c"):       # "a" used again, so "b" is the oldest when "c" arrives
            await cache.get(key, compute(key), keep=lambda v: True)
        await cache.get("a", compute("a"), keep=lambda v: True)
        await cache.get("b", compute("b"), keep=lambda v: True)

        def boom():
            calls.append("boom")
            raise RuntimeError("sandbox broke")

        for _ in range(2):
            with pytest.raises(RuntimeError):
                await cache.get("x", boom, keep=lambda v: True)

    asyncio.run(scenario())
    assert calls == ["a", "b", "c", "b", "boom", "boom"]
    assert len(cache) == 2


def test_pipeline_grader_regrades_what_the_suite_calls_not_repeatable(monkeypatch):
    """make_grader's memo keeps repeatable grades only: a timed-out program is graded again next time."""
    import asyncio

    from trinity.config import load
    from trinity.pipeline.rollouts import make_grader
    from trinity.tasks.base import Grade
    from trinity.tasks.types import TaskItem

    calls = []

    class Flaky:
        async def grade_detail(self, item, reply, *, judge=None):
            calls.append(reply)
            return Grade(0.0, reply, "timed out", repeatable=reply == "fixed")

    monkeypatch.setattr("trinity.tasks.registry.get_suite", lambda name, cfg: Flaky())
    grade = make_grader(load())
    item = TaskItem(suite="toy", item_id="1", prompt="p", reference="r")

    async def twice(reply):
        await grade(item, reply)
        await grade(item, reply)

    asyncio.run(twice("slow"))
    asyncio.run(twice("fixed"))
    assert calls == ["slow", "slow", "fixed"]
