"""Task suites: loaders, prompt formats, answer extractors and graders, in a registry.

    from trinity.tasks import get_suite, suite_names, prepare_suites, load_items
    suite = get_suite("gsm8k", settings)     # settings optional (SuiteSettings; trinity.pipeline.suites.suite_for)
    reward = await suite.grade(item, reply, judge=pool_client)

The registry (trinity.tasks.registry) names every suite class; importing it reads no data and starts nothing.
"""

from trinity.tasks.base import FilteredRow, Grade, TaskSuite
from trinity.tasks.prepare import load_items, prepare_suites
from trinity.tasks.registry import SUITES, get_suite, suite_class, suite_names
from trinity.tasks.types import MalformedRow, TaskItem

__all__ = ["SUITES", "FilteredRow", "Grade", "TaskSuite", "get_suite", "suite_class", "suite_names",
           "load_items", "prepare_suites", "MalformedRow", "TaskItem"]
