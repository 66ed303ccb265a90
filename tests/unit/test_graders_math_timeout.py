"""The math grader's time limit: pathological answers are cut off, and its worker survives its function
raising, is replaced when killed while idle, and raises when it cannot start. Under load:
tests/integration/test_graders_math_timeout_workers.py."""

import time

import pytest
from graders_support import PATHOLOGICAL

from trinity.tasks.graders.math_answer import answers_equivalent
from trinity.tasks.graders.worker_pool import WorkerError, WorkerPool, WorkerStartError

LIMIT_S = 2.0
# generous: the limit, plus a loaded CI machine's slack to notice and kill; never a worker start (warmed first)
CUT_OFF_S = LIMIT_S + 3.0


@pytest.mark.parametrize("answer", PATHOLOGICAL, ids=["tower10", "tower2", "braces", "fracs", "long_sum"])
def test_pathological_answer_is_cut_off(answer):
    assert answers_equivalent("\\sqrt{2}", "2^{1/2}")      # the worker is up: its start is not timed
    start = time.monotonic()
    assert not answers_equivalent(answer, "3", timeout_s=LIMIT_S)
    assert time.monotonic() - start < CUT_OFF_S
    assert answers_equivalent("\\frac{\\pi}{3}", "\\pi/3")   # and the grader still works afterwards


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
