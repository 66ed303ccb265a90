"""The math grader under load: pathological answers are cut off by the time limit, a worker stuck in C
code is killed, and concurrent graders (threads, event loops) each get their own right verdict."""

import asyncio
import time

import pytest

from trinity.tasks import get_suite
from trinity.tasks.graders.math_answer import answers_equivalent
from trinity.tasks.graders.worker_pool import WorkerError, WorkerPool, WorkerStartError, WorkerTimeout

LIMIT_S = 2.0
# generous: the limit, plus a loaded CI machine's slack to notice and kill; never a worker start (warmed first)
CUT_OFF_S = LIMIT_S + 3.0

PATHOLOGICAL = ["10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", "{" * 3000 + "1" + "}" * 3000,
                "\\frac{1}{" * 300 + "2" + "}" * 300, "1+" * 20000 + "1"]


@pytest.mark.parametrize("answer", PATHOLOGICAL, ids=["tower10", "tower2", "braces", "fracs", "long_sum"])
def test_pathological_answer_is_cut_off(answer):
    assert answers_equivalent("\\sqrt{2}", "2^{1/2}")      # the worker is up: its start is not timed
    start = time.monotonic()
    assert not answers_equivalent(answer, "3", timeout_s=LIMIT_S)
    assert time.monotonic() - start < CUT_OFF_S
    assert answers_equivalent("\\frac{\\pi}{3}", "\\pi/3")   # and the grader still works afterwards


@pytest.mark.integration
def test_worker_stuck_in_c_code_is_killed_and_replaced():
    pool = WorkerPool(1)
    try:
        assert pool.call(pow, 2, 10, timeout_s=30) == 1024
        start = time.monotonic()
        with pytest.raises(WorkerTimeout):     # a signal cannot interrupt this big-integer power
            pool.call(pow, 10, 10**9, timeout_s=0.5)
        assert time.monotonic() - start < 0.5 + 3.0
        assert pool.call(pow, 3, 3, timeout_s=30) == 27
    finally:
        pool.close()


def test_worker_survives_its_function_raising():
    pool = WorkerPool(1)
    try:
        with pytest.raises(WorkerError):
            pool.call(int, "not a number", timeout_s=30)
        worker = pool._idle[0]
        assert pool.call(int, "12", timeout_s=30) == 12 and pool._idle == [worker]
    finally:
        pool.close()


def test_worker_killed_while_idle_is_replaced():
    pool = WorkerPool(1)
    try:
        assert pool.call(pow, 2, 3, timeout_s=30) == 8
        pool._idle[0].process.kill()
        pool._idle[0].process.join()
        assert pool.call(pow, 2, 4, timeout_s=30) == 16
    finally:
        pool.close()


def test_worker_that_cannot_start_raises_instead_of_answering():
    pool = WorkerPool(1, warm_imports=("trinity_no_such_module",))
    with pytest.raises(WorkerStartError):
        pool.call(pow, 2, 2, timeout_s=30)


CASES = [("\\dfrac{1}{2}", "0.5", 1.0), ("2\\sqrt{3}", "\\sqrt{12}", 1.0), ("\\sqrt{6}", "\\sqrt{12}", 0.0),
         ("[1, 2)", "\\left[1, 2\\right)", 1.0), ("(1, 2)", "[1, 2)", 0.0), ("\\frac{\\pi}{3}", "\\pi/3", 1.0),
         ("\\frac{3\\pi}{4}", "\\frac{\\pi}{4}", 0.0), ("2, -3", "-3, 2", 1.0), ("-3, 2, 5", "-3, 2", 0.0),
         ("(x+1)^2", "x^2+2x+1", 1.0)]
# each runs to the grader's full limit, holding a worker meanwhile
STUCK = [(PATHOLOGICAL[0], "1", 0.0), (PATHOLOGICAL[2], "2", 0.0)]


@pytest.mark.integration
def test_concurrent_grading_from_event_loop_threads_gets_every_verdict_right():
    """Graders run as asyncio.to_thread calls; a timed-out neighbour must not cost anyone their verdict."""
    suite = get_suite("math500")

    cases = STUCK[:1] + CASES * 3 + STUCK[1:]

    async def grade_all():
        items = [suite.item(f"c{n}", "q", {"answer": ref}) for n, (_, ref, _) in enumerate(cases)]
        replies = [f"The answer is \\boxed{{{answer}}}." for answer, _, _ in cases]
        return await asyncio.gather(*(suite.grade(item, reply) for item, reply in zip(items, replies)))

    start = time.monotonic()
    scores = asyncio.run(grade_all())
    assert scores == [expected for _, _, expected in cases]
    assert time.monotonic() - start < 120
