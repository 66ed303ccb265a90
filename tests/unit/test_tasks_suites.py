"""Suites on the real packaged data, the registry, online suites offline, local files."""

import asyncio
import contextlib
import json
from collections import Counter

import pytest

from trinity.errors import TrinityError
from trinity.tasks import SUITES, MalformedRow, get_suite, suite_names
from trinity.tasks.base import KINDS, FilteredRow

OFFLINE = {"mmlu": (14000, 14042), "gsm8k": (1319, 1319), "gpqa_diamond": (198, 198), "aime": (60, 60),
           "aime2024": (30, 30), "aime2025": (30, 30), "math500": (311, 311), "humaneval": (164, 164),
           "mtbench": (80, 80), "bigcodebench": (825, 825)}
ONLINE = ("livecodebench", "math500_full", "rlpr", "mbpp")
FORMAT_HINT = {"math": "\\boxed", "mc": "The answer is X", "code": "```python"}


def _items(suite):
    items = []
    for row in suite.load_rows():
        with contextlib.suppress(MalformedRow, FilteredRow):
            items.append(suite.to_item(row))
    return items


def test_registry_covers_every_suite():
    names = suite_names()
    assert set(OFFLINE) | set(ONLINE) <= set(names)
    for name in names:
        assert SUITES[name].name == name and SUITES[name].kind in KINDS
    with pytest.raises(TrinityError):
        get_suite("no_such_suite")


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_offline_suite_loads_real_data(name):
    suite = get_suite(name, seed=0)
    first, second = _items(suite), _items(get_suite(name, seed=0))
    low, high = OFFLINE[name]
    assert low <= len(first) <= high
    assert [i.item_id for i in first] == [i.item_id for i in second]          # stable ids
    assert len({i.item_id for i in first}) >= len(first) - 30                 # MMLU has a few duplicates
    assert all(i.prompt.strip() for i in first)
    json.dumps([i.reference for i in first[:50]])                             # references are JSON-able
    hint = FORMAT_HINT.get(suite.kind)
    if hint:
        assert all(hint in i.prompt for i in first)
    assert suite.version and suite.version != "unknown"


def test_mmlu_drops_placeholder_rows():
    suite = get_suite("mmlu")
    bad = [r for r in suite.load_rows() if r.get("correct_answer") == "answer"]
    assert len(bad) == 2
    for row in bad:
        with pytest.raises(MalformedRow):
            suite.to_item(row)


def test_gpqa_choices_shuffled_deterministically():
    items = _items(get_suite("gpqa_diamond", seed=0))
    letters = Counter(i.reference["answer"] for i in items)
    assert set(letters) == set("ABCD") and max(letters.values()) < 0.4 * len(items)
    again = _items(get_suite("gpqa_diamond", seed=0))
    assert [i.prompt for i in items] == [i.prompt for i in again]
    other = _items(get_suite("gpqa_diamond", seed=1))
    assert [i.reference for i in items] != [i.reference for i in other]


def test_bigcodebench_skip_missing_libs_filters():
    suite = get_suite("bigcodebench", library="polars", skip_missing_libs=True)
    kept = _items(suite)
    assert 0 < len(kept) < 825
    assert all("polars" in i.prompt and "{library_import}" not in i.prompt for i in kept)


@pytest.mark.parametrize("name", ONLINE)
def test_online_suite_without_hub_says_how_to_use_a_local_file(name, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "datasets", None)   # as if not installed
    with pytest.raises(TrinityError) as err:
        get_suite(name).load_rows()
    assert f"tasks.local_files.{name}" in str(err.value)


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_local_file_mbpp_loads_and_grades(tmp_path):
    path = _write_jsonl(tmp_path / "mbpp.jsonl", [
        {"task_id": 1, "text": "Write a function add(a, b) returning the sum.", "test_list": ["assert add(1, 2) == 3"]},
        {"task_id": 2, "text": "no tests"},
    ])
    suite = get_suite("mbpp", local_file=str(path))
    rows = suite.load_rows()
    item = suite.to_item(rows[0])
    with pytest.raises(MalformedRow):
        suite.to_item(rows[1])
    assert "assert add(1, 2) == 3" in item.prompt and suite.version.startswith("local-file:sha256:")
    good = "```python\ndef add(a, b):\n    return a + b\n```"
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    assert asyncio.run(suite.grade(item, good)) == 1.0
    assert asyncio.run(suite.grade(item, bad)) == 0.0


def test_local_file_livecodebench_parquet_stdin_and_functional(tmp_path):
    import polars as pl
    rows = [
        {"question_id": "q1", "question_content": "Read two ints, print their sum.", "starter_code": "",
         "tests": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                              {"input": "5 5\n", "output": "10\n", "testtype": "stdin"}]),
         "fn_name": None, "split": "test"},
        {"question_id": "q2", "question_content": "Return twice x.",
         "starter_code": "class Solution:\n    def twice(self, x: int) -> int:\n        ",
         "tests": json.dumps([{"input": "4", "output": "8", "testtype": "functional"}]), "fn_name": "twice",
         "split": None},
    ]
    path = tmp_path / "lcb.parquet"
    pl.DataFrame(rows).write_parquet(path)
    suite = get_suite("livecodebench", local_file=str(path))
    loaded = suite.load_rows()
    one, two = suite.to_item(loaded[0]), suite.to_item(loaded[1])
    assert suite.default_split(loaded[0]) == "test" and suite.default_split(loaded[1]) is None
    assert asyncio.run(suite.grade(one, "```python\na, b = map(int, input().split())\nprint(a + b)\n```")) == 1.0
    assert asyncio.run(suite.grade(one, "```python\nprint(3)\n```")) == 0.0
    fn = "```python\nclass Solution:\n    def twice(self, x):\n        return 2 * x\n```"
    assert asyncio.run(suite.grade(two, fn)) == 1.0
    assert asyncio.run(suite.grade(two, fn.replace("2 * x", "x"))) == 0.0


def test_local_file_math500_full_and_rlpr(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [{"unique_id": "a/1", "problem": "1/2+0?", "answer": "\\frac{1}{2}"}])
    suite = get_suite("math500_full", local_file=str(path))
    item = suite.to_item(suite.load_rows()[0])
    assert asyncio.run(suite.grade(item, "The answer is \\boxed{0.5}")) == 1.0
    path = _write_jsonl(tmp_path / "r.jsonl", [{"id": "r1", "question": "Capital of France?", "answer": "Paris"}])
    rlpr = get_suite("rlpr", local_file=str(path))
    item = rlpr.to_item(rlpr.load_rows()[0])
    assert asyncio.run(rlpr.grade(item, "It is \\boxed{paris}.")) == 1.0
    assert asyncio.run(rlpr.grade(item, "It is \\boxed{Lyon}.")) == 0.0
