"""The Verifier's checking procedures (an agent's `setup.verify`, trinity.pool.agents.CHECKS).

A reading Verifier answers the Verifier prompt; on the local 1.5B model it accepts most wrong answers. A
checking Verifier looks instead: what it sees is only what any Verifier sees (the task as given and the
answer under review), never a suite's hidden tests or reference answers, and its verdict is a reply like
any other, `ACCEPT ...` or `REJECT <reason>`, so the turn protocol, the recording and exact fitness read it
unchanged.

- The task is code (its statement carries a ```python block that defines a function): the answer's program
  runs in the code sandbox against the examples the statement itself gives (doctest lines, `f(x) == y` and
  its kin, Input/Output blocks: trinity.episodes.statement_examples); under `resolve_tests`, where the
  statement gives none, against assertions the agent writes from the statement instead (one call per task:
  the request does not depend on the answer, so every answer of an item shares it). Only there:
  Qwen2.5-Coder-1.5B's own asserts copy the statement's examples and then add cases with wrong expected values,
  so adding them to the examples rejects many right answers (benchmarks/verifier_checks.py,
  docs/benchmarks/verifier_checks/results.json). REJECT names the first failing case. A value compares equal
  to the expected one as Python's `==` says, or as a list to a tuple of the same items, or as a number within
  a relative 1e-6.
- Otherwise the agent solves the task anew with its own Worker setup (the very request of its first turn,
  so a response cache or a recording already holds it) and compares final answers: the letter of a
  multiple-choice task, else the final answer as the math grader reads it. REJECT names both answers.
A check that has nothing to compare (no example in the statement, no final answer in the re-solve)
accepts and says so: it has no evidence against the answer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from trinity.episodes.statement_examples import Case, examples, parses
from trinity.pool.types import CallResult
from trinity.pool.verify_layer import CheckCall
from trinity.sandbox import SandboxLimits, run_python
from trinity.tasks.graders.choice import LETTERS, extract_choice
from trinity.tasks.graders.code import extract_code
from trinity.tasks.graders.math_answer import answers_equivalent, extract_math_answer

CHECK_LIMITS = SandboxLimits(wall_s=10.0, cpu_s=5, memory_mb=1024, nproc=8, fsize_mb=1, nofile=64)
TESTS_MAX_TOKENS = 320
MAX_CASES = 12
TEST_WRITER_SYSTEM = "You write unit tests for Python functions."
TEST_WRITER_PROMPT = (
    "Write up to 5 Python assert statements that check a correct solution of the task below: first every "
    "example its description gives, then a few simple cases whose expected value you are certain of. One "
    "assert per line, each calling the function directly; no imports, no other code, no explanation.\n\n"
    "Task:\n{task}")
# The test writer's reply is begun for it: asked for tests, a coding model writes the function instead (on
# Qwen2.5-Coder-1.5B, 2 of 2 HumanEval items; begun with the first assert, it wrote only asserts).
TEST_WRITER_START = "```python\nassert {function}("

_PY_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)
_OPTION = re.compile(r"^\s*\(?([A-J])[\).:]\s+\S", re.MULTILINE)


# ------------------------------------------------------------------------------------------ reading the task

def task_kind(task: str) -> str:
    """'choice' (lettered options), 'code' (a function to write), else 'answer'."""
    if len(set(_OPTION.findall(task))) >= 3:
        return "choice"
    if task_function(task) is not None:
        return "code"
    return "answer"


def task_code(task: str) -> str | None:
    """The statement's Python block that defines a function (the stub to complete), or None."""
    blocks: list[str] = _PY_BLOCK.findall(task)
    for block in blocks:
        if _DEF.search(block):
            return block
    return None


def task_function(task: str) -> str | None:
    """The name of the function the task asks for: the last one its code block defines."""
    code = task_code(task)
    names = _DEF.findall(code) if code is not None else []
    return names[-1] if names else None


def statement_examples(task: str) -> list[Case]:
    """The examples the statement gives (doctest lines, `f(x) == y` and its kin, Input/Output blocks:
    trinity.episodes.statement_examples)."""
    return examples(task_code(task) or "", task_function(task))


def test_writer_messages(task: str, function: str) -> list[dict[str, str]]:
    """The request for tests of `task`'s `function`: the statement, and the reply begun with its first assert."""
    return [{"role": "system", "content": TEST_WRITER_SYSTEM},
            {"role": "user", "content": TEST_WRITER_PROMPT.format(task=task)},
            {"role": "assistant", "content": TEST_WRITER_START.format(function=function)}]


def written_tests(reply: str, function: str) -> list[Case]:
    """The assert lines of a test-writing reply that call the task's function and parse. A server that
    continues the begun reply (TEST_WRITER_START) returns it without its beginning; one that answers anew
    returns a whole reply: both read."""
    begun = TEST_WRITER_START.format(function=function) + reply
    return max((_asserts(text, function) for text in (reply, begun)), key=len)


def _asserts(reply: str, function: str) -> list[Case]:
    text = "\n".join(_PY_BLOCK.findall(reply)) or reply
    cases = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("assert ") and f"{function}(" in line and parses(line, "exec"):
            cases.append(Case(line))
    return cases


# ------------------------------------------------------------------------------------------ running code

_RUNNER = '''

def __trinity_same(__a, __b):
    import math
    try:
        if bool(__a == __b):
            return True
    except Exception:
        pass
    if isinstance(__a, (list, tuple)) and isinstance(__b, (list, tuple)):
        return len(__a) == len(__b) and all(__trinity_same(x, y) for x, y in zip(__a, __b))
    __num = (int, float)
    if isinstance(__a, __num) and isinstance(__b, __num) and not isinstance(__a, bool) and not isinstance(__b, bool):
        return math.isclose(__a, __b, rel_tol=1e-6, abs_tol=1e-9)
    return False

def __trinity_check(__cases):
    import sys
    for __i, (__src, __want) in enumerate(__cases):
        try:
            if __want is None:
                exec(__src, globals())
                continue
            __got = eval(__src, globals())
            try:
                __ok = __trinity_same(__got, eval(__want, globals()))
            except Exception:
                __ok = False
            if not __ok and repr(__got) != __want:
                print("FAILED", __i, "got", repr(__got)[:200])
                sys.exit(3)
        except AssertionError:
            print("FAILED", __i, "assertion")
            sys.exit(3)
        except Exception as __e:
            print("FAILED", __i, "raised", type(__e).__name__, str(__e)[:200])
            sys.exit(3)
    print("PASSED", len(__cases))

__trinity_check({cases!r})
'''


def candidate_program(task: str, answer: str) -> str:
    """The answer's program as the task's stub would take it: a whole function redefines the stub (the
    statement's block goes first, for its imports and helpers); a bare body completes it."""
    code = extract_code(answer)
    stub = task_code(task) or ""
    function = task_function(task)
    if function is not None and re.search(rf"^\s*def\s+{re.escape(function)}\s*\(", code, re.MULTILINE):
        return f"{stub}\n    pass\n\n{code}" if stub else code
    if code[:1].isspace():
        return stub + code
    return f"{stub}\n    pass\n\n{code}" if stub else code


def run_cases(task: str, answer: str, cases: list[Case]) -> tuple[bool, str]:
    """(passed, the reason for the verdict) of the answer's program on `cases`, in the sandbox."""
    program = candidate_program(task, answer) + _RUNNER.format(cases=[(c.source, c.expected) for c in cases])
    result = run_python(program, limits=CHECK_LIMITS)
    last = (result.stdout.strip().splitlines() or [""])[-1]
    if result.ok and last.startswith("PASSED"):
        return True, f"the answer passed the {len(cases)} example(s) it was run on"
    match = re.match(r"FAILED (\d+) (.*)", last)
    if match:
        case = cases[int(match.group(1))]
        return False, f"failing case: {case.show()} ({match.group(2)})"
    if result.timed_out or (result.returncode is not None and not 0 <= result.returncode < 128):   # killed: a limit
        return False, (f"the program did not finish within its limits on the examples ({CHECK_LIMITS.wall_s:g} s, "
                       f"{CHECK_LIMITS.cpu_s} CPU-s)")
    error = (result.stderr.strip().splitlines() or ["it failed"])[-1]
    return False, f"the program fails before its examples run: {error[:200]}"


# ------------------------------------------------------------------------------------------ comparing answers

def final_answer(kind: str, text: str, task: str) -> str:
    if kind == "choice":
        n = max((LETTERS.index(x) + 1 for x in _OPTION.findall(task)), default=4)
        return extract_choice(text, n)
    return extract_math_answer(text)


def same_answer(kind: str, a: str, b: str) -> bool:
    return a == b if kind == "choice" else answers_equivalent(a, b)


# ------------------------------------------------------------------------------------------ the procedures

async def _check_code(call: CheckCall, *, tests: bool) -> tuple[str, list[CallResult]]:
    ctx = call.context
    assert ctx.answer is not None
    cases = statement_examples(ctx.task)
    calls: list[CallResult] = []
    if tests and not cases:   # the model's own tests only where the statement gives no example (module doc)
        function = task_function(ctx.task) or ""
        reply = await call.ask(call.model, test_writer_messages(ctx.task, function),
                               role=None, max_tokens=TESTS_MAX_TOKENS, temperature=ctx.fresh_temperature,
                               sample_index=ctx.fresh_sample)
        calls.append(reply)
        if not reply.ok:
            return "", calls
        cases += written_tests(reply.text, function)
    cases = cases[:MAX_CASES]
    if not cases:
        return "ACCEPT: nothing to run (the task gives no example to check against).", calls
    passed, why = await asyncio.to_thread(run_cases, ctx.task, ctx.answer, cases)
    return (f"ACCEPT: {why}." if passed else f"REJECT: {why}"), calls


async def _check_by_resolving(call: CheckCall, kind: str) -> tuple[str, list[CallResult]]:
    ctx = call.context
    assert ctx.answer is not None
    mine = await call.ask(call.model, [dict(m) for m in ctx.fresh], role="worker", max_tokens=ctx.fresh_max_tokens,
                          temperature=ctx.fresh_temperature, sample_index=ctx.fresh_sample)
    if not mine.ok:
        return "", [mine]
    own, theirs = final_answer(kind, mine.text, ctx.task), final_answer(kind, ctx.answer, ctx.task)
    if not own:
        return "ACCEPT: my own solution reached no final answer to compare with.", [mine]
    if not theirs:
        return f"REJECT: the answer states no final answer; solving it anew gives {own}.", [mine]
    if await asyncio.to_thread(same_answer, kind, own, theirs):
        return f"ACCEPT: solving it anew gives the same answer, {own}.", [mine]
    return f"REJECT: solving it anew gives {own}, not {theirs}.", [mine]


def _procedure(tests: bool) -> Callable[[CheckCall], Awaitable[tuple[str, list[CallResult]]]]:
    async def check(call: CheckCall) -> tuple[str, list[CallResult]]:
        kind = task_kind(call.context.task)
        if kind == "code":
            return await _check_code(call, tests=tests)
        return await _check_by_resolving(call, kind)
    return check


# name -> procedure (the names of trinity.pool.agents.CHECKS)
PROCEDURES: dict[str, Callable[[CheckCall], Awaitable[tuple[str, list[CallResult]]]]] = {
    "resolve": _procedure(tests=False),
    "resolve_tests": _procedure(tests=True),
}
