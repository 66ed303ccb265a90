"""The local file formats in docs/TASKS.md are right: the example row of each grader kind, written to a
JSONL file and given to its suite as `local_file`, becomes exactly one item of that suite and kind, and a
right answer to it scores 1 with the suite's real grader (the judge kind with a stand-in judge)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from trinity.tasks import get_suite
from trinity.tasks.base import KINDS
from trinity.tasks.prepare import build_items

DOC = Path(__file__).resolve().parents[2] / "docs" / "TASKS.md"
EXAMPLE = re.compile(r"^### (\w+): `(\w+)`\n+```json\n(.+?)\n```", re.MULTILINE)

RIGHT_ANSWER = {
    "gsm8k": "3 + 4 = 7, so the answer is \\boxed{7}.",
    "mmlu": "Plants take in carbon dioxide. The answer is B",
    "mbpp": "```python\ndef add(a, b):\n    return a + b\n```",
    "mtbench": "Keeps drinks cold for a day. Refill it anywhere and leave plastic bottles behind.",
}


class RatingJudge:
    async def chat(self, model, messages, **kwargs):
        return SimpleNamespace(ok=True, text="A clear, concise answer. Rating: [[9]]")


def examples() -> list[tuple[str, str, dict]]:
    return [(kind, suite, json.loads(row)) for kind, suite, row in EXAMPLE.findall(DOC.read_text())]


def test_every_grader_kind_has_one_example():
    assert sorted(kind for kind, _, _ in examples()) == sorted(KINDS)


@pytest.mark.parametrize("kind, suite_name, row", examples(), ids=[s for _, s, _ in examples()])
def test_the_example_row_becomes_an_item_and_a_right_answer_scores_one(tmp_path, kind, suite_name, row):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    suite = get_suite(suite_name, local_file=str(path), judge_model="judge")
    assert suite.kind == kind
    items, counts = build_items(suite)
    assert counts == {"rows": 1, "malformed": 0, "filtered": 0, "duplicate": 0}
    (item, split), = items
    assert split == row.get("split")
    score = asyncio.run(suite.grade(item, RIGHT_ANSWER[suite_name], judge=RatingJudge()))
    assert score == (0.9 if kind == "judge" else 1.0)
