"""The test suite's own scheduling: benchmarks/test_times.py turns a JUnit report into seconds per file and the
start order table, and tests/conftest.py starts the longest files first (the shared Prefect server's files as
one unit), new files after the measured ones by their marks."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import conftest
from benchmark_support import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _test_times():
    return load_benchmark("test_times")


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.integration.test_a" name="test_one" time="14.5"/>
<testcase classname="tests.unit.test_b" name="test_two[x-y]" time="0.5"/>
<testcase classname="tests.unit.test_b" name="test_three" time="0.25"/>
<testcase classname="tests.unit.test_c.TestK" name="test_four" time="3.0"/>
<testcase classname="tests.unit.test_c.TestK" name="test_five" time="0.04"/>
</testsuite></testsuites>
"""


def test_a_junit_report_becomes_seconds_per_file_and_the_start_order_table(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    times = _test_times()
    rows = times.per_file(report)
    assert [(r["file"], r["tests"], r["slowest"]) for r in rows] == [
        ("integration/test_a.py", 1, "test_one"), ("unit/test_c.py", 2, "test_four"),
        ("unit/test_b.py", 2, "test_two[x-y]")]
    table = times.durations_table(rows, "2026-12-04")
    assert table["measured"] == "2026-12-04"
    # keyed by the path from the repository root, as conftest looks files up; longest first; a class is its file
    assert table["seconds"] == {"tests/integration/test_a.py": 14.5, "tests/unit/test_c.py": 3.0,
                                "tests/unit/test_b.py": 0.8}
    assert list(table["seconds"]) == ["tests/integration/test_a.py", "tests/unit/test_c.py", "tests/unit/test_b.py"]


class _Item:
    def __init__(self, root: Path, path: str, mark: str | None = None):
        self.path, self.mark, self.name = root / path, mark, path

    def get_closest_marker(self, name):
        return self.mark if name == self.mark else None


def test_the_longest_files_start_first_and_new_files_follow_by_mark(tmp_path, monkeypatch):
    shared_a, shared_b = conftest.SHARED_PREFECT_SERVER
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"seconds": {"tests/unit/test_long.py": 50.0, "tests/integration/test_mid.py": 30.0,
                                             shared_a: 20.0, shared_b: 20.0}}))
    monkeypatch.setattr(conftest, "DURATIONS", table)
    root = tmp_path
    items = [_Item(root, "tests/unit/test_new.py"), _Item(root, "tests/integration/test_new_slow.py", "slow"),
             _Item(root, "tests/integration/test_mid.py", "integration"), _Item(root, shared_b, "slow"),
             _Item(root, "tests/unit/test_long.py"), _Item(root, "tests/integration/test_new_int.py", "integration"),
             _Item(root, shared_a, "slow")]
    conftest.pytest_collection_modifyitems(SimpleNamespace(rootpath=root), items)
    # the shared server's two files count as one unit of 40 s, ahead of a 30 s file; the sort is stable
    assert [i.name for i in items] == ["tests/unit/test_long.py", shared_b, shared_a, "tests/integration/test_mid.py",
                                       "tests/integration/test_new_slow.py", "tests/integration/test_new_int.py",
                                       "tests/unit/test_new.py"]


def test_without_a_table_the_order_is_by_mark(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "DURATIONS", tmp_path / "missing.json")
    items = [_Item(tmp_path, "tests/unit/test_u.py"), _Item(tmp_path, "tests/integration/test_i.py", "integration"),
             _Item(tmp_path, "tests/integration/test_s.py", "slow")]
    conftest.pytest_collection_modifyitems(SimpleNamespace(rootpath=tmp_path), items)
    assert [i.name for i in items] == ["tests/integration/test_s.py", "tests/integration/test_i.py",
                                       "tests/unit/test_u.py"]


def test_the_committed_table_names_existing_test_files():
    seconds = json.loads(conftest.DURATIONS.read_text())["seconds"]
    missing = [path for path in seconds if not (ROOT / path).is_file()]
    assert len(seconds) > 50
    assert not missing, f"tests/durations.json names files that are gone: {missing}; refresh it: make test-durations"
