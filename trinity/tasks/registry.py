"""The suite registry: suite name -> TaskSuite class, written out (tasks.train / tasks.transfer name keys).

The suite modules import trinity.tasks.base, never this module, so importing it is enough to find every
suite: there is no registration step and nothing to load first.
"""

from __future__ import annotations

from typing import Any

from trinity.errors import ConfigError
from trinity.tasks.base import TaskSuite, suite_options
from trinity.tasks.suites_code import BigCodeBench, HumanEval
from trinity.tasks.suites_judge import MTBench
from trinity.tasks.suites_math import AIME, AIME2024, AIME2025, GSM8K, MATH500
from trinity.tasks.suites_mc import MMLU, GPQADiamond
from trinity.tasks.suites_online import MBPP, RLPR, LiveCodeBench, MATH500Full

SUITES: dict[str, type[TaskSuite]] = {
    # offline: data that PyPI packages ship
    "mmlu": MMLU,
    "gpqa_diamond": GPQADiamond,
    "gsm8k": GSM8K,
    "math500": MATH500,
    "aime2024": AIME2024,
    "aime2025": AIME2025,
    "aime": AIME,
    "humaneval": HumanEval,
    "bigcodebench": BigCodeBench,
    "mtbench": MTBench,
    # hub-only (or a local file in tasks.local_files)
    "livecodebench": LiveCodeBench,
    "mbpp": MBPP,
    "math500_full": MATH500Full,
    "rlpr": RLPR,
}


def suite_names() -> list[str]:
    return sorted(SUITES)


def suite_class(name: str) -> type[TaskSuite]:
    if name not in SUITES:
        raise ConfigError(f"unknown task suite '{name}'; known: {', '.join(sorted(SUITES))}")
    return SUITES[name]


def get_suite(name: str, cfg: Any = None, **overrides: Any) -> TaskSuite:
    """An instance of suite `name`, configured from `cfg` (optional) and keyword overrides."""
    options = suite_options(cfg, name)
    options.update(overrides)
    return suite_class(name)(options)
