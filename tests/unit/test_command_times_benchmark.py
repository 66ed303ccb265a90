"""benchmarks/command_times.py: a `make test` row is recorded as pytest's own time (the goal's figure), the whole
`.ci/run` kept in its note; other rows as they were timed."""

from __future__ import annotations

from benchmark_support import load_benchmark

ct = load_benchmark("command_times")


def _row(command: str, wall: float, summary: str | None) -> dict:
    return {"command": command, "date": "2026-12-06", "wall_s": wall, "exit": 0, "cpu": "x", "amx": False,
            "cores": 2, "where": "a fresh clone, set-up included", "summary": summary, "note": "quiet"}


def test_a_make_test_row_takes_pytests_own_time_and_keeps_the_whole_run_in_its_note():
    row = ct.pytest_own_time(_row("make test", 539.5, "1312 passed in 390.08s (0:06:30)"))
    assert row["wall_s"] == 390.08 and row["where"] == "pytest's own time in a fresh clone's `.ci/run`"
    assert row["note"] == "quiet; set-up and lint not counted (the whole `.ci/run`: 540 s)"
    assert ct.pytest_own_time(row) == row          # already converted: unchanged


def test_other_rows_and_a_run_without_a_summary_keep_their_wall_time():
    run = _row("make run", 341.9, None)
    assert ct.pytest_own_time(run) == run
    failed = _row("make test", 120.0, None)           # pytest never printed its summary
    assert ct.pytest_own_time(failed) == failed
