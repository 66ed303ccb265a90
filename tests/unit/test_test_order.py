"""The test suite's own scheduling: scripts/test_durations.py turns a `--durations=0` log into the per-file table,
and tests/conftest.py starts the longest files first (the shared Prefect server's files as one unit), new files
after the measured ones by their marks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import conftest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("test_durations", ROOT / "scripts" / "test_durations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOG = """\
============================= slowest durations =============================
12.50s call     tests/integration/test_a.py::test_one
2.00s setup    tests/integration/test_a.py::test_one
0.50s call     tests/unit/test_b.py::test_two[x-y]
0.25s teardown tests/unit/test_b.py::test_three
3.00s call     tests/unit/test_c.py::TestK::test_four
(120 durations < 0.005s hidden.  Use -vv to show these durations.)
=== 5 passed in 20.00s ===
"""


def test_the_script_sums_each_files_durations_and_writes_the_table(tmp_path):
    script = _script()
    assert script.file_seconds(LOG.splitlines()) == {"tests/integration/test_a.py": 14.5, "tests/unit/test_c.py": 3.0,
                                                     "tests/unit/test_b.py": 0.8}
    log, out = tmp_path / "log", tmp_path / "durations.json"
    log.write_text(LOG)
    assert script.main([str(log), "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["seconds"]) == ["tests/integration/test_a.py", "tests/unit/test_c.py",
                                                           "tests/unit/test_b.py"]
    log.write_text("=== 5 passed in 20.00s ===\n")
    assert script.main([str(log), "--out", str(out)]) == 2       # no durations: an error, the table kept


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
