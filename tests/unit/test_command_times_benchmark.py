"""benchmarks/command_times.py: a `make test` row is recorded as pytest's own time (the goal's figure), the whole
`.ci/run` kept in its note; other rows as they were timed."""

from __future__ import annotations

import json

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


def test_the_vector_units_tell_one_model_name_apart():
    assert ct.vector_units({"avx2", "avx512f", "avx512_bf16", "amx_tile"}) == "AMX"
    assert ct.vector_units({"avx2", "avx512f", "avx512_bf16"}) == "AVX-512 and bfloat16"
    assert ct.vector_units({"avx2", "avx512f"}) == "AVX-512"
    assert ct.vector_units({"avx2", "fma"}) == "AVX2 only"
    assert ct.vector_units({"sse4_2"}) == "no AVX2"
    assert ct.vector_units(None) is None


def test_readme_gives_each_kind_of_one_cpu_model_its_own_time(tmp_path):
    from test_docs_rendered import render_docs

    def row(command, wall, units, date):
        return {**_row(command, wall, None), "cpu": "AMD EPYC", "vector_units": units, "date": date}

    runs = [row("make run", 300.0, None, "2026-12-05"),                    # before the units were recorded
            row("make run", 541.0, "AVX-512 and bfloat16", "2026-12-06"),
            row("make run", 700.0, "AVX2 only", "2026-12-07"),
            {**row("make run", 999.0, "AVX2 only", "2026-12-07"), "exit": 2}]  # failed: not quoted
    times = tmp_path / "results.json"
    times.write_text(json.dumps({"runs": runs}))
    text = render_docs.times(render_docs.Sources(replace={render_docs.TIMES: times}))
    assert "**9 min 1 s** on a 2-core AMD EPYC with AVX-512 and bfloat16, no AMX" in text
    assert "**11 min 40 s** on a 2-core AMD EPYC with AVX2 only (no AVX-512, no AMX)" in text
    assert "5 min" not in text and "16 min" not in text    # the unit-less row gives way; the failed run is left out
