"""Suite graders end to end on real items."""

import asyncio
from dataclasses import dataclass

from trinity.tasks import get_suite


def _first(name, **opts):
    suite = get_suite(name, **opts)
    return suite, suite.to_item(suite.load_rows()[0])


def test_humaneval_canonical_passes_and_wrong_fails():
    suite = get_suite("humaneval")
    rows = suite.load_rows()[:3]
    for row in rows:
        item = suite.to_item(row)
        full = row["prompt"] + row["canonical_solution"]
        assert asyncio.run(suite.grade(item, f"Here:\n```python\n{full}\n```")) == 1.0
        assert asyncio.run(suite.grade(item, row["canonical_solution"])) == 1.0       # bare body completes the prompt
        assert asyncio.run(suite.grade(item, f"```python\n{row['prompt']}    pass\n```")) == 0.0
    assert asyncio.run(suite.grade(item, "")) == 0.0


def test_bigcodebench_ground_truth_passes():
    suite = get_suite("bigcodebench", library="polars", skip_missing_libs=True)
    for row in suite.load_rows():
        if set(row["libs"]) <= {"random", "re", "json", "collections", "itertools", "string", "math", "datetime"}:
            break
    item = suite.to_item(row)
    truth = row["ground_truth"]["polars"]
    assert asyncio.run(suite.grade(item, f"```python\n{truth}\n```")) == 1.0
    assert asyncio.run(suite.grade(item, "```python\ndef task_func(*a, **k):\n    return None\n```")) == 0.0


def test_math_and_choice_suites():
    suite, item = _first("gsm8k")
    assert asyncio.run(suite.grade(item, "... #### 18")) == 1.0
    assert asyncio.run(suite.grade(item, "The answer is \\boxed{$18.00}")) == 1.0
    assert asyncio.run(suite.grade(item, "The answer is \\boxed{19}")) == 0.0
    suite, item = _first("aime")
    assert asyncio.run(suite.grade(item, f"The answer is \\boxed{{{item.reference['answer']}}}")) == 1.0
    suite, item = _first("mmlu")
    letter = item.reference["answer"]
    other = "A" if letter != "A" else "B"
    assert asyncio.run(suite.grade(item, f"Reasoning... The answer is {letter}")) == 1.0
    assert asyncio.run(suite.grade(item, f"Reasoning... The answer is {other}")) == 0.0


@dataclass
class _Result:
    text: str
    ok: bool = True
    error: str | None = None


class _Judge:
    def __init__(self, text, ok=True):
        self.text, self.ok, self.calls = text, ok, []

    async def chat(self, model, messages, **kw):
        self.calls.append((model, messages))
        return _Result(self.text, self.ok, None if self.ok else "http 503")


def test_mtbench_uses_shipped_judge_prompts():
    suite = get_suite("mtbench", judge_model="judge-m")
    rows = suite.load_rows()
    writing = suite.to_item(next(r for r in rows if r["category"] == "writing"))
    math = suite.to_item(next(r for r in rows if r["category"] == "math"))
    judge = _Judge("Solid answer. Rating: [[9]]")
    assert asyncio.run(suite.grade(writing, "An essay.", judge=judge)) == 0.9
    model, messages = judge.calls[-1]
    assert model == "judge-m" and "[[rating]]" in messages[1]["content"]
    asyncio.run(suite.grade(math, "x = 3", judge=judge))
    assert "Reference Answer" in judge.calls[-1][1][1]["content"]
    failed = asyncio.run(suite.grade_detail(writing, "An essay.", judge=_Judge("", ok=False)))
    assert failed.score == 0.0 and "503" in failed.error
    assert asyncio.run(suite.grade(writing, "An essay.")) == 0.0              # no judge given
