"""A task item as every stage sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskItem:
    suite: str                 # registry name of the suite, e.g. "gsm8k"
    item_id: str               # stable id within the suite (survives re-preparation)
    prompt: str                # the task prompt as shown to pool models
    reference: Any             # what the grader needs: answer string, letter, tests, judge reference...
    split: str = "train"       # train | validation | test
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return f"{self.suite}/{self.item_id}"


class MalformedRow(ValueError):
    """A source row that cannot become a TaskItem; prepare counts and skips these."""
