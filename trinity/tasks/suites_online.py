"""Suites only on the Hugging Face hub: LiveCodeBench, full MATH-500, RLPR, MBPP.

With `datasets` installed and the hub reachable they load from the hub; otherwise loading fails with
one SourceUnavailable that says how to give a local file instead: `tasks.local_files.<suite>: path`
to a JSONL or Parquet file. The columns each suite reads are in its `LOCAL_COLUMNS` (the hub's own
column names are accepted too). A local file may carry a `split` column (train|validation|test) that
overrides the seeded split for its rows.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import pickle
import re
import zlib
from collections.abc import Mapping
from typing import Any, NoReturn

from trinity.sandbox import SandboxLimits
from trinity.tasks.base import Grade, require
from trinity.tasks.graders.judge import Judge
from trinity.tasks.graders.math_answer import answers_equivalent, extract_math_answer, normalize
from trinity.tasks.sources import load_hub_rows
from trinity.tasks.suites_code import CODE_INSTRUCTION, CodeSuite
from trinity.tasks.suites_math import MathSuite, math_prompt
from trinity.tasks.types import MalformedRow, TaskItem


class _StrOnlyUnpickler(pickle.Unpickler):
    # LCB's private tests are a pickled JSON string: allow no objects
    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def decode_tests(value: Any) -> list[dict[str, Any]]:
    """LiveCodeBench test lists: a list, a JSON string, or base64(zlib(pickle(JSON string)))."""
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [dict(t) for t in value]
    text = str(value)
    tests: list[dict[str, Any]]
    try:
        tests = json.loads(text)
        return tests
    except json.JSONDecodeError:
        pass
    raw = _StrOnlyUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
    tests = json.loads(raw)
    return tests


_LCB_HARNESS = r'''
import io as _io, json as _json, sys as _sys
_CODE = {code!r}
_TESTS = _json.loads({tests!r})
_FN = {fn!r}
def _same(a, b):
    return a.split() == b.split()
for _t in _TESTS:
    if _t.get("testtype") == "functional" and _FN:
        _ns = {{"__name__": "solution"}}
        exec(compile(_CODE, "solution.py", "exec"), _ns)
        _f = getattr(_ns["Solution"](), _FN) if "Solution" in _ns else _ns[_FN]
        _args = [_json.loads(_l) for _l in str(_t["input"]).split("\n") if _l.strip()]
        _got = _f(*_args)
        _want = _json.loads(_t["output"])
        if _got != _want and not (isinstance(_got, tuple) and list(_got) == _want):
            raise SystemExit(1)
    else:
        _sys.stdin = _io.StringIO(str(_t["input"]))
        _out, _real = _io.StringIO(), _sys.stdout
        _sys.stdout = _out
        try:
            exec(compile(_CODE, "solution.py", "exec"), {{"__name__": "__main__"}})
        except SystemExit as _e:
            if _e.code not in (None, 0):
                _sys.stdout = _real
                raise SystemExit(1)
        finally:
            _sys.stdout = _real
        if not _same(_out.getvalue(), str(_t["output"])):
            raise SystemExit(1)
'''


class LiveCodeBench(CodeSuite):
    """Problems of `train_release` get seeded train/validation splits; problems added after it, up to
    `test_release`, are the test split (the paper trains on v1 and tests on newer problems)."""

    name = "livecodebench"
    online = True
    source = "hf:livecodebench/code_generation_lite"
    LOCAL_COLUMNS = ("question_id, question_content, starter_code (optional), tests (list or JSON string of "
                     "{input, output, testtype: stdin|functional}), fn_name (optional), split (optional)")
    default_limits = SandboxLimits(wall_s=30, cpu_s=30)

    def source_version(self) -> str:
        return f"{self.options.get('train_release', 'release_v1')}->{self.options.get('test_release', 'release_v6')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        train_rel = str(self.options.get("train_release", "release_v1"))
        test_rel = str(self.options.get("test_release", "release_v6"))
        kw: dict[str, Any] = dict(config=None, split="test", columns_doc=self.LOCAL_COLUMNS, trust_remote_code=True)
        train_ids = {r["question_id"] for r in load_hub_rows(self.name, self.source[3:], version_tag=train_rel, **kw)}
        rows = load_hub_rows(self.name, self.source[3:], version_tag=test_rel, **kw)
        for row in rows:
            row["split"] = None if row["question_id"] in train_ids else "test"
        return rows

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        text = str(row["question_content"]).strip()
        starter = str(row.get("starter_code") or "").strip()
        if starter:
            return (f"{text}\n\nUse this starter code:\n```python\n{starter}\n```\n\n{CODE_INSTRUCTION}")
        return (f"{text}\n\nWrite a Python program that reads the input from standard input and prints the answer "
                f"to standard output. Reply with the program in a single ```python code block.")

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        qid, _ = require(row, "question_id", "question_content", suite=self.name)
        try:
            tests = decode_tests(row.get("tests")) or (decode_tests(row.get("public_test_cases")) +
                                                        decode_tests(row.get("private_test_cases")))
            meta = row.get("metadata") or {}
            meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
        except Exception as e:
            raise MalformedRow(f"livecodebench/{qid}: unreadable tests ({type(e).__name__})") from None
        if not tests:
            raise MalformedRow(f"livecodebench/{qid}: no tests")
        fn = row.get("fn_name") or meta.get("func_name")
        return self.item(qid, self.format_prompt(row), {"tests": tests, "fn_name": fn},
                         difficulty=row.get("difficulty"), contest_date=str(row.get("contest_date") or ""))

    def compose(self, item: TaskItem, code: str) -> str:
        ref = item.reference
        return _LCB_HARNESS.format(code=code, tests=json.dumps(ref["tests"]), fn=ref.get("fn_name"))


class MBPP(CodeSuite):
    name = "mbpp"
    online = True
    source = "hf:google-research-datasets/mbpp"
    LOCAL_COLUMNS = "task_id, text (the description), test_list (list of assert lines), test_setup_code (optional)"

    def source_version(self) -> str:
        return f"{self.options.get('config', 'full')}/{self.options.get('hub_split', 'test')}"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return load_hub_rows(self.name, self.source[3:], config=str(self.options.get("config", "full")),
                             split=str(self.options.get("hub_split", "test")), columns_doc=self.LOCAL_COLUMNS)

    def format_prompt(self, row: Mapping[str, Any]) -> str:
        text = str(row.get("text") or row.get("prompt") or "").strip()
        first = _tests(row)[0]
        return f"{text}\nYour code should pass this test:\n{first}\n\n{CODE_INSTRUCTION}"

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        task_id = require(row, "task_id", suite=self.name)[0]
        if not (row.get("text") or row.get("prompt")) or not _tests(row):
            raise MalformedRow(f"mbpp/{task_id}: needs text and test_list")
        return self.item(task_id, self.format_prompt(row),
                         {"tests": _tests(row), "setup": str(row.get("test_setup_code") or "")})

    def compose(self, item: TaskItem, code: str) -> str:
        ref = item.reference
        return f"{code}\n\n{ref['setup']}\n" + "\n".join(ref["tests"]) + "\n"


def _tests(row: Mapping[str, Any]) -> list[str]:
    tests = row.get("test_list") or []
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            tests = [t for t in tests.splitlines() if t.strip()]
    return [str(t) for t in tests]


class MATH500Full(MathSuite):
    """The full MATH-500 from the hub (the packaged `math500` holds a 311-problem subset)."""

    name = "math500_full"
    online = True
    source = "hf:HuggingFaceH4/MATH-500"
    LOCAL_COLUMNS = "unique_id, problem, answer, subject (optional), level (optional)"

    def source_version(self) -> str:
        return "test"

    def load_source_rows(self) -> list[dict[str, Any]]:
        return load_hub_rows(self.name, self.source[3:], config=None, split="test", columns_doc=self.LOCAL_COLUMNS)

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        uid, problem, answer = require(row, "unique_id", "problem", "answer", suite=self.name)
        return self.item(uid, math_prompt(problem), {"answer": str(answer)},
                         subject=row.get("subject"), level=row.get("level"))


class RLPR(MathSuite):
    """RLPR (general-domain reasoning with reference answers). Graded by the math grader, falling back
    to normalised exact match for non-numeric answers (the paper's probability-based reward is not used)."""

    name = "rlpr"
    online = True
    source = "hf:openbmb/RLPR-train-dataset"
    LOCAL_COLUMNS = "id, question, answer"

    def source_version(self) -> str:
        return str(self.options.get("hub_split", "train"))

    def load_source_rows(self) -> list[dict[str, Any]]:
        return load_hub_rows(self.name, self.source[3:], config=None, split=str(self.options.get("hub_split", "train")),
                             columns_doc=self.LOCAL_COLUMNS)

    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        question, answer = row.get("question"), row.get("answer")
        if question is None and isinstance(row.get("prompt"), list):      # hub schema: chat messages
            users = [m.get("content") for m in row["prompt"] if isinstance(m, Mapping) and m.get("role") == "user"]
            question = users[-1] if users else None
        if answer is None and isinstance(row.get("reward_model"), Mapping):
            answer = row["reward_model"].get("ground_truth")
        if not question or answer is None or not str(answer).strip():
            raise MalformedRow("rlpr: row needs a question and an answer")
        item_id = row.get("id") or hashlib.sha256(str(question).encode()).hexdigest()[:16]
        return self.item(item_id, math_prompt(str(question)), {"answer": str(answer).strip()},
                         data_source=row.get("data_source"))

    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        answer = extract_math_answer(reply)
        ref = str(item.reference["answer"])
        if not answer:
            return Grade(0.0, "")
        if _loose(answer) == _loose(ref):
            return Grade(1.0, answer)
        same = await asyncio.to_thread(answers_equivalent, answer, ref)
        return Grade(1.0 if same else 0.0, answer)


def _loose(text: str) -> str:
    return re.sub(r"[^a-z0-9.\-/]", "", normalize(text).lower())
