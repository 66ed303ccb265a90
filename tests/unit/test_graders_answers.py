"""Math, multiple-choice, code-extraction and judge graders on positive and negative cases."""

import asyncio
from dataclasses import dataclass

import pytest

from trinity.tasks.graders.choice import extract_choice
from trinity.tasks.graders.code import extract_code
from trinity.tasks.graders.judge import judge_score, parse_rating
from trinity.tasks.graders.math_answer import answers_equivalent, extract_math_answer


@pytest.mark.parametrize("reply,expected", [
    ("so x = \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("work\n#### 1,234", "1,234"),
    ("Hence the answer is 42.", "42"),
    ("Working it out. The answer is 7. <idea>computed it</idea>", "7"),   # the protocol asks for an idea tag after
    ("The answer is 3.5. Then we stop.", "3.5"),
    ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("first 3, then 5 apples", "5"),
    ("nothing here", ""),
])
def test_extract_math_answer(reply, expected):
    assert extract_math_answer(reply) == expected


@pytest.mark.parametrize("a,b", [
    ("18.0", "18"), ("0.5", "1/2"), ("\\frac{1}{2}", "0.5"), ("\\dfrac12", "1/2"), ("$1,000", "1000"),
    ("\\$18", "18"), ("18 dollars", "18"), ("x = 5", "5"), ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("2\\sqrt{3}", "\\sqrt{12}"), ("(1, 2)", "(1,2)"), ("10^\\circ", "10"), ("\\frac{\\pi}{4}", "pi/4"),
    ("(x+1)^2", "x^2+2x+1"), ("50\\%", "50"),
    # the forms math-verify decides: set and interval algebra, a boxed reference, the unicode minus, i
    ("(1, \\infty) \\cup (-\\infty, -1)", "(-\\infty, -1) \\cup (1, \\infty)"), ("\\left[1, 2\\right)", "[1, 2)"),
    ("2, -3", "-3, 2"), ("\\sqrt{12}", "\\boxed{2\\sqrt{3}}"), ("\u22127", "-7"), ("2i + 1", "1 + 2i"),
    ("i \\cdot 2 + 1", "1 + 2i"), ("1.2 \\times 10^4", "12000"), ("1e2", "100"),
])
def test_equivalent(a, b):
    assert answers_equivalent(a, b)


@pytest.mark.parametrize("a,b", [
    ("17", "18"), ("0.51", "1/2"), ("", "3"), ("(1, 3)", "(1, 2)"), ("\\sqrt{3}", "\\sqrt{2}"),
    ("__import__('os').system('true')", "0"),
    ("[1, 2]", "[1, 2)"), ("(-1, 3)", "(3, -1)"), ("x = 3 \\text{ or } x = 5", "5"), ("-3", "-3, 2"),
    ("1 - 2i", "1 + 2i"), ("1e400", "5"),     # 10**400 once overflowed float() and raised
])
def test_not_equivalent(a, b):
    assert not answers_equivalent(a, b)


@pytest.mark.parametrize("reply,letter", [
    ("The answer is B", "B"), ("Answer: (C)", "C"), ("**Answer:** D", "D"), ("A", "A"),
    ("I think it's (B) because...", "B"), ("\\boxed{C}", "C"), ("Option D is right.", "D"),
    ("A cat sat. The answer is C.", "C"), ("No idea.", ""),
])
def test_extract_choice(reply, letter):
    assert extract_choice(reply) == letter


def test_extract_code_prefers_last_python_block():
    reply = "```python\nx = 1\n```\ntext\n```python\ndef f():\n    return 2\n```\n```text\nout\n```"
    assert extract_code(reply) == "def f():\n    return 2"
    assert extract_code("def g():\n    return 1\n") == "def g():\n    return 1"


@dataclass
class _Result:
    text: str
    ok: bool = True
    error: str | None = None


class _Judge:
    def __init__(self, reply: _Result | Exception):
        self.reply, self.calls = reply, []

    async def chat(self, model, messages, **kw):
        self.calls.append((model, messages))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_judge_rating_and_failures():
    assert parse_rating("Good. Rating: [[8]]") == 8.0
    assert parse_rating("no rating") is None
    ok = asyncio.run(judge_score(_Judge(_Result("fine. [[7]]")), "m", "sys", "user"))
    assert ok.score == pytest.approx(0.7) and ok.error is None
    failed = asyncio.run(judge_score(_Judge(_Result("", ok=False, error="http 500")), "m", "sys", "user"))
    assert failed.score == 0.0 and "http 500" in failed.error
    raised = asyncio.run(judge_score(_Judge(RuntimeError("boom")), "m", "sys", "user"))
    assert raised.score == 0.0 and "boom" in raised.error
    unparsable = asyncio.run(judge_score(_Judge(_Result("I like it")), "m", "sys", "user"))
    assert unparsable.score == 0.0 and unparsable.error
