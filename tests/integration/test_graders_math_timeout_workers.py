"""The math grader under load: a worker stuck in C code is killed and replaced, and concurrent graders
(threads, event loops) each get their own right verdict. Time limits and worker life cycle:
tests/unit/test_graders_math_timeout.py."""

import asyncio
import time

import pytest
from graders_support import PATHOLOGICAL

from trinity.tasks import get_suite
from trinity.tasks.graders.worker_pool import WorkerPool, WorkerTimeout

pytestmark = pytest.mark.integration


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


CASES = [("\\dfrac{1}{2}", "0.5", 1.0), ("2\\sqrt{3}", "\\sqrt{12}", 1.0), ("\\sqrt{6}", "\\sqrt{12}", 0.0),
         ("[1, 2)", "\\left[1, 2\\right)", 1.0), ("(1, 2)", "[1, 2)", 0.0), ("\\frac{\\pi}{3}", "\\pi/3", 1.0),
         ("\\frac{3\\pi}{4}", "\\frac{\\pi}{4}", 0.0), ("2, -3", "-3, 2", 1.0), ("-3, 2, 5", "-3, 2", 0.0),
         ("(x+1)^2", "x^2+2x+1", 1.0)]
# each runs to the grader's full limit, holding a worker meanwhile
STUCK = [(PATHOLOGICAL[0], "1", 0.0), (PATHOLOGICAL[2], "2", 0.0)]


def test_concurrent_grading_from_event_loop_threads_gets_every_verdict_right():
    """Graders run as asyncio.to_thread calls; a timed-out neighbour must not cost anyone their verdict."""
    suite = get_suite("math500")

    cases = STUCK[:1] + CASES * 3 + STUCK[1:]

    async def grade_all():
        items = [suite.item(f"c{n}", "q", {"answer": ref}) for n, (_, ref, _) in enumerate(cases)]
        replies = [f"The answer is \\boxed{{{answer}}}." for answer, _, _ in cases]
        return await asyncio.gather(*(suite.grade(item, reply) for item, reply in zip(items, replies, strict=True)))

    start = time.monotonic()
    scores = asyncio.run(grade_all())
    assert scores == [expected for _, _, expected in cases]
    assert time.monotonic() - start < 120
