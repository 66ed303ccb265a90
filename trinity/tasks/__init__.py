"""Task suites: loaders, prompt formats, answer extractors and graders, in a registry.

    from trinity.tasks import get_suite, suite_names, prepare_suites, load_items
    suite = get_suite("gsm8k", cfg)          # cfg optional
    reward = await suite.grade(item, reply, judge=pool_client)

Nothing is loaded at import time; the suite modules register themselves on first registry access.
"""

from trinity.tasks.base import SUITES, FilteredRow, Grade, TaskSuite, get_suite, suite_class, suite_names
from trinity.tasks.prepare import load_items, prepare_suites
from trinity.tasks.types import MalformedRow, TaskItem

__all__ = ["SUITES", "FilteredRow", "Grade", "TaskSuite", "get_suite", "suite_class", "suite_names",
           "load_items", "prepare_suites", "MalformedRow", "TaskItem"]
