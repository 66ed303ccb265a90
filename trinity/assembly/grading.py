"""The grader a stage's episodes are scored with: each item's suite grader behind one bounded memo."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.tasks.base import SuiteSettings, TaskSuite
    from trinity.tasks.graders.judge import Judge

Grader = Callable[[TaskItem, str], Awaitable[float]]

# Graded (item, answer) pairs remembered per grader: the same answer to the same item comes back often (the
# response cache replays replies across candidates and generations), and grading a program runs a sandboxed
# process each time.
GRADE_MEMO_SIZE = 65536


def memo_grader(settings: SuiteSettings, judge: Judge | None = None) -> Grader:
    """The reward of an answer, from the item's suite grader (suites configured by `settings`; `judge` the
    pool a judged suite asks). Scores are remembered per (item, answer digest) in a bounded LRU: a grader is a
    function of the item and the answer. An exception is never remembered (the protocol records it on the
    episode that hit it), nor a grade the suite marks as not repeatable (a sandbox timeout, a judge that
    failed): the next episode grades again."""
    from trinity.tasks.registry import get_suite

    suites: dict[str, TaskSuite] = {}
    memo: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def grade(item: TaskItem, answer: str) -> float:
        key = (item.uid, hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest())
        if key in memo:
            memo.move_to_end(key)
            return memo[key]
        suite = suites.get(item.suite)
        if suite is None:
            suite = suites[item.suite] = get_suite(item.suite, settings)
        if not answer:
            return 0.0
        detail = await suite.grade_detail(item, answer, judge=judge)
        score = float(detail.score)
        if not detail.repeatable:
            return score
        memo[key] = score
        if len(memo) > GRADE_MEMO_SIZE:
            memo.popitem(last=False)
        return score

    return grade
