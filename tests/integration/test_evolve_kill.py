"""SIGKILL a real evolution run mid-generation (twice), or stop it between a generation's episode part and
its checkpoint; resume, and match an uninterrupted run exactly, episode parts included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from evolve_fixture import run, toy_cfg
from process_support import wait_for

from trinity.evolve.checkpoint import load_checkpoint
from trinity.pipeline.evolution_inputs import config_fingerprint

FIXTURE = Path(__file__).resolve().parents[1] / "evolve_fixture.py"
GENERATIONS = 6


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


def _start(out_dir: Path, markers: Path) -> subprocess.Popen:
    markers.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, str(FIXTURE), str(out_dir), "--marker-dir", str(markers),
                             "--sleep", "0.05", "--generations", str(GENERATIONS)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_when(proc: subprocess.Popen, marker: Path, timeout: float = 60.0) -> None:
    try:   # polled often: the candidate's evaluation, the window to kill in, lasts 0.05 s
        wait_for(marker.exists, timeout, marker.name, (proc,), interval_s=0.005)
    except AssertionError:
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {marker.name}: {proc.stderr.read().decode()[-2000:]}") from None
        raise
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)  # the marker is written before a candidate's evaluation: mid-generation
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _checkpoint(out_dir: Path) -> dict:
    cfg = toy_cfg(generations=GENERATIONS)
    return load_checkpoint(out_dir / "checkpoint.pkl", config_fingerprint(cfg, 18))


def _next_generation(out_dir: Path) -> int:
    return _checkpoint(out_dir)["next_generation"]


def _parts(out_dir: Path) -> list[str]:
    return sorted(p.name for p in (out_dir / "episodes").iterdir())


def _committed(generations: int) -> list[str]:
    return sorted(["x0.parquet", *(f"gen-{g:04d}.parquet" for g in range(generations))])


def _same_parts(a: Path, b: Path) -> None:
    assert _parts(a) == _parts(b)
    for name in _parts(a):
        assert pl.read_parquet(a / "episodes" / name).equals(pl.read_parquet(b / "episodes" / name)), name


def test_sigkill_mid_generation_and_resume_matches_uninterrupted_run(tmp_path):
    ref = run(tmp_path / "ref" / "run", toy_cfg(generations=GENERATIONS, tmp=tmp_path / "ref"))

    out = tmp_path / "killed" / "run"
    _kill_when(_start(out, tmp_path / "m1"), tmp_path / "m1" / "g3_c2")
    assert _next_generation(out) == 3  # generations 0-2 committed, generation 3 was in progress
    assert _parts(out) == _committed(3)  # generation 3's part is written only once it finishes
    _kill_when(_start(out, tmp_path / "m2"), tmp_path / "m2" / "g4_c4")  # kill the resumed process too
    assert _next_generation(out) == 4
    assert _parts(out) == _committed(4)
    assert not (out / "episodes.parquet").exists()  # the full table is written when a run stops
    assert not (tmp_path / "m2" / "g2_c0").exists()  # it resumed, it did not start over
    assert (tmp_path / "m1" / "val_g-1_sample").exists() and (tmp_path / "m1" / "val_g-1_argmax").exists()
    assert not list((tmp_path / "m2").glob("val_g-1_*"))  # ... nor validated x0 again

    resumed = run(out, toy_cfg(generations=GENERATIONS, tmp=tmp_path / "killed"))
    assert resumed.resumed and resumed.stop_reason == ref.stop_reason == "completed"

    a, b = tmp_path / "ref" / "run", out
    assert (a / "coordinator" / "params.npy").read_bytes() == (b / "coordinator" / "params.npy").read_bytes()
    assert (a / "coordinator" / "meta.json").read_text() == (b / "coordinator" / "meta.json").read_text()
    assert resumed.params.tobytes() == ref.params.tobytes()
    assert resumed.final_mean.tobytes() == ref.final_mean.tobytes()

    episodes_a, episodes_b = pl.read_parquet(a / "episodes.parquet"), pl.read_parquet(b / "episodes.parquet")
    # no duplicate rows after two resumes: x0 and generations 1, 3, 5 validated, each with both routing modes
    assert episodes_b.height == GENERATIONS * 6 * 8 + (1 + 3) * 2 * 16
    assert episodes_a.equals(episodes_b)
    _same_parts(a, b)
    refs = _checkpoint(b)["episode_parts"]
    assert [r["file"] for r in refs] == ["x0.parquet", *(f"gen-{g:04d}.parquet" for g in range(GENERATIONS))]
    assert sum(r["rows"] for r in refs) == episodes_b.height
    routing_a, routing_b = pl.read_parquet(a / "routing.parquet"), pl.read_parquet(b / "routing.parquet")
    assert routing_a.equals(routing_b)
    assert routing_b["generation"].unique().sort().to_list() == list(range(-1, GENERATIONS))
    timing = ["wall_s"]  # measured time is the only column allowed to differ
    gens_a = pl.read_parquet(a / "generations.parquet").drop(timing)
    gens_b = pl.read_parquet(b / "generations.parquet").drop(timing)
    assert gens_a.equals(gens_b)

    metrics_a = json.loads((tmp_path / "ref" / "metrics" / "evolve.json").read_text())
    metrics_b = json.loads((tmp_path / "killed" / "metrics" / "evolve.json").read_text())
    assert "wall_s" not in metrics_a   # a run fact: the run folder's timings.json (docs/REPRODUCIBILITY.md)
    assert metrics_a == metrics_b
    assert np.array_equal(np.load(b / "coordinator" / "params.npy"), ref.params)


def test_stop_between_a_part_and_its_checkpoint_rewrites_the_part(tmp_path, monkeypatch):
    """The part of generation 3 is on disk, its checkpoint is not: the resumed run drops that part (here
    made unreadable, so reading it would fail) and any temp file a kill left, runs generation 3 again and
    ends as a run never stopped."""
    import trinity.evolve.loop as loop

    ref = run(tmp_path / "ref" / "run", toy_cfg(generations=GENERATIONS, tmp=tmp_path / "ref"))
    out = tmp_path / "killed" / "run"
    cfg = toy_cfg(generations=GENERATIONS, tmp=tmp_path / "killed")
    save = loop.save_checkpoint

    def die_before_committing_generation_3(path, payload):
        if payload["next_generation"] == 4:
            raise KeyboardInterrupt  # nothing after this line runs: as a kill
        save(path, payload)

    monkeypatch.setattr(loop, "save_checkpoint", die_before_committing_generation_3)
    with pytest.raises(KeyboardInterrupt):
        run(out, cfg)
    monkeypatch.undo()
    assert _checkpoint(out)["next_generation"] == 3 and _parts(out) == _committed(4)
    (out / "episodes" / "gen-0003.parquet").write_bytes(b"torn")
    (out / "episodes" / ".gen-0004.parquet.x1y2.tmp").write_bytes(b"half")

    resumed = run(out, cfg)
    assert resumed.resumed and resumed.params.tobytes() == ref.params.tobytes()
    assert _parts(out) == _committed(GENERATIONS)
    _same_parts(tmp_path / "ref" / "run", out)
    ref_episodes = pl.read_parquet(tmp_path / "ref" / "run" / "episodes.parquet")
    assert pl.read_parquet(out / "episodes.parquet").equals(ref_episodes)
