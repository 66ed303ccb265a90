"""Checkpoint files: round trip, corrupt and mismatched checkpoints, the ways to start over, and the episode
parts the checkpoint references instead of holding the rows, and checkpoints older versions wrote (version 4
is upgraded, anything older starts over)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from evolve_fixture import run, toy_cfg

from trinity.config import with_values
from trinity.errors import TrinityError
from trinity.evolve.checkpoint import MAGIC, load_checkpoint, save_checkpoint
from trinity.evolve.errors import CheckpointError
from trinity.evolve.upgrade import CHECKPOINT_VERSION
from trinity.pipeline.evolution_inputs import config_fingerprint


def test_round_trip(tmp_path):
    payload = {"fingerprint": "abc", "x": np.arange(5.0), "rows": [{"a": 1}]}
    save_checkpoint(tmp_path / "ck.pkl", payload)
    loaded = load_checkpoint(tmp_path / "ck.pkl", "abc")
    assert np.array_equal(loaded["x"], payload["x"]) and loaded["rows"] == payload["rows"]
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed into place


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, damage):
    path = tmp_path / "ck.pkl"
    save_checkpoint(path, {"fingerprint": "abc", "x": list(range(100))})
    data = path.read_bytes()
    if damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = b"not a checkpoint at all"
    else:
        data = b""
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match="corrupt") as e:
        load_checkpoint(path, "abc")
    assert isinstance(e.value, TrinityError) and "resume=false" in str(e.value)


def test_fingerprint_covers_the_run_but_not_budget_or_resume():
    cfg = toy_cfg()
    fp = config_fingerprint(cfg, 18)
    assert config_fingerprint(cfg, 19) != fp
    for key, value in [("evolve.sigma0", 0.1), ("protocol.max_turns", 4), ("seed", 9), ("tasks.train", ["x"]),
                       ("pool.models.alpha", {"price_in_per_mtok": 1}), ("coordinator.routing", "argmax")]:
        assert config_fingerprint(with_values(cfg, {key: value}), 18) != fp, key
    same = with_values(cfg, {"evolve.budget.max_calls": 10, "evolve.resume": False, "paths.metrics": "elsewhere"})
    assert config_fingerprint(same, 18) == fp


def test_run_checkpoint_mismatch_corruption_and_fresh(tmp_path):
    out = tmp_path / "run"
    first = run(out, toy_cfg(generations=2, tmp=tmp_path))
    assert first.generations_completed == 2 and not first.resumed
    again = run(out, toy_cfg(generations=2, tmp=tmp_path))  # finished run: resumes and returns the same
    assert again.resumed and np.array_equal(again.params, first.params)

    with pytest.raises(CheckpointError, match="different configuration"):
        run(out, toy_cfg(generations=2, sigma0=0.1, tmp=tmp_path))
    fresh = run(out, toy_cfg(generations=2, sigma0=0.1, tmp=tmp_path), fresh=True)
    assert not fresh.resumed and fresh.generations_completed == 2

    cfg = toy_cfg(generations=2, tmp=tmp_path, **{"evolve.resume": False})
    assert not run(out, cfg).resumed

    ck = out / "checkpoint.pkl"
    ck.write_bytes(MAGIC + b"0" * 64 + b"\nbroken")
    with pytest.raises(CheckpointError, match="corrupt"):
        run(out, toy_cfg(generations=2, tmp=tmp_path))


def test_a_checkpoint_unreadable_after_a_library_upgrade_names_the_versions(tmp_path):
    """The header keeps the versions readable when the pickle is not: a class the body needs is gone
    (as after a pycma upgrade that moved it) and the error names both versions."""
    import hashlib
    import json as _json
    import pickle
    import sys
    import types

    from trinity.evolve.checkpoint import MAGIC, library_versions, load_checkpoint
    from trinity.evolve.errors import CheckpointError

    module = types.ModuleType("vanishing_cma")

    class State:
        pass

    State.__module__ = "vanishing_cma"
    State.__qualname__ = "State"
    module.State = State
    sys.modules["vanishing_cma"] = module
    try:
        body = pickle.dumps({"fingerprint": "f", "state": State()})
    finally:
        del sys.modules["vanishing_cma"]
    old = {**library_versions(), "cma": "0.0.1"}
    header = hashlib.sha256(body).hexdigest() + " " + _json.dumps(old)
    path = tmp_path / "checkpoint.pkl"
    path.write_bytes(MAGIC + header.encode() + b"\n" + body)
    with pytest.raises(CheckpointError, match=r"written with cma 0\.0\.1 and cannot be read with cma \d"):
        load_checkpoint(path, "f")
    # a readable checkpoint from other versions still resumes (with a warning), an old header too
    ok = pickle.dumps({"fingerprint": "f"})
    path.write_bytes(MAGIC + (hashlib.sha256(ok).hexdigest() + " " + _json.dumps(old)).encode() + b"\n" + ok)
    assert load_checkpoint(path, "f") == {"fingerprint": "f"}
    path.write_bytes(MAGIC + hashlib.sha256(ok).hexdigest().encode() + b"\n" + ok)
    assert load_checkpoint(path, "f") == {"fingerprint": "f"}


# ---------------------------------------------------------------------- episode parts beside the checkpoint
def _fingerprint(cfg):
    return config_fingerprint(cfg, 18)  # the toy problem's 3 agents x 6 features


def _parts(out):
    return sorted(p.name for p in (out / "episodes").glob("*.parquet"))


def test_one_part_per_generation_with_its_rows_and_none_in_the_checkpoint(tmp_path):
    generations = 5
    cfg = toy_cfg(generations=generations, every=2, tmp=tmp_path)
    out = tmp_path / "run"
    run(out, cfg)
    validated = {1, 3, 4}  # every 2nd generation and the last
    expected = {"x0.parquet": 2 * 16,
                **{f"gen-{g:04d}.parquet": 6 * 8 + (2 * 16 if g in validated else 0) for g in range(generations)}}
    assert _parts(out) == sorted(expected)
    for name, rows in expected.items():
        assert pl.read_parquet(out / "episodes" / name).height == rows, name

    payload = load_checkpoint(out / "checkpoint.pkl", _fingerprint(cfg))
    assert "episode_rows" not in payload
    assert [(r["file"], r["rows"]) for r in payload["episode_parts"]] == list(expected.items())
    # the published table is the parts in order, nothing more
    parts = pl.concat([pl.read_parquet(out / "episodes" / name) for name in expected])
    assert pl.read_parquet(out / "episodes.parquet").equals(parts)


def test_checkpoint_size_does_not_grow_with_the_episodes(tmp_path):
    """The checkpoint used to hold every episode row: on this fixture it grew from ~61 kB after generation 2
    to ~137 kB after generation 8 (2.25x, +12.7 kB per generation, its rows re-pickled every time). Without
    rows only the per-generation summaries grow (~0.85 kB per generation on ~20 kB of state)."""
    out = tmp_path / "run"
    sizes = {}

    def measure(report):
        sizes[report["generations_done"]] = (out / "checkpoint.pkl").stat().st_size

    run(out, toy_cfg(generations=8, every=2, tmp=tmp_path), progress=measure)
    assert sizes[8] < 1.3 * sizes[2], sizes
    assert sizes[8] - sizes[2] < 6 * 2_000, sizes  # per generation, far under one generation's rows


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap", "missing"])
def test_a_damaged_part_is_refused_on_resume_naming_the_file(tmp_path, damage):
    cfg = toy_cfg(generations=3, tmp=tmp_path)
    out = tmp_path / "run"
    run(out, cfg)
    part = out / "episodes" / "gen-0001.parquet"
    data = part.read_bytes()
    if damage == "flip":
        part.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "truncate":
        part.write_bytes(data[: len(data) // 2])
    elif damage == "swap":
        part.write_bytes((out / "episodes" / "gen-0000.parquet").read_bytes())
    else:
        part.unlink()
    with pytest.raises(CheckpointError, match="gen-0001.parquet") as e:
        run(out, cfg)
    assert "resume=false" in str(e.value)
    fresh = run(out, cfg, fresh=True)  # starting over rewrites every part
    assert not fresh.resumed and _parts(out) == ["gen-0000.parquet", "gen-0001.parquet", "gen-0002.parquet",
                                                  "x0.parquet"]


def _stopped_run(tmp_path, stop_at: int, **toy):
    """A reference run of toy_cfg(**toy), then the same run stopped by Ctrl-C in generation `stop_at`
    (its checkpoint left behind): (reference result, the stopped run's folder, its config, its fingerprint)."""
    from evolve_fixture import ToyProblem

    cfg = toy_cfg(**toy, tmp=tmp_path / "ref")
    reference = run(tmp_path / "ref" / "run", cfg)
    problem = ToyProblem(cfg)

    def stop(g, xs, **kw):
        if g == stop_at:
            raise KeyboardInterrupt
        return problem.evaluate_population(g, xs, **kw)

    out = tmp_path / "old" / "run"
    cfg_old = toy_cfg(**toy, tmp=tmp_path / "old")
    with pytest.raises(KeyboardInterrupt):
        run(out, cfg_old, evaluate_population=stop)
    return reference, out, cfg_old, config_fingerprint(cfg, problem.n_params)


@pytest.mark.parametrize("version", [2, 3])
def test_a_checkpoint_older_than_version_4_starts_the_run_over(tmp_path, caplog, version):
    """Versions 2 (every episode row inside) and 3 (the strategy state a plain dict) are no longer read: the
    run starts over, with a warning naming the version, and ends as a run never stopped."""
    import logging

    reference, out, cfg_old, fingerprint = _stopped_run(tmp_path, 3, generations=5, every=2)
    payload = load_checkpoint(out / "checkpoint.pkl", fingerprint)
    old = {**payload, "version": version}
    if version == 3:
        old["state"] = {"strategy": "sep_cma", "generation": 3}
    save_checkpoint(out / "checkpoint.pkl", old)

    with caplog.at_level(logging.WARNING, logger="trinity.evolve"):
        again = run(out, cfg_old)
    assert f"version {version}" in caplog.text and "starting this run over" in caplog.text
    assert not again.resumed and again.generations_completed == 5
    assert np.array_equal(again.params, reference.params)
    assert load_checkpoint(out / "checkpoint.pkl", fingerprint)["version"] == CHECKPOINT_VERSION
    ref_episodes = pl.read_parquet(tmp_path / "ref" / "run" / "episodes.parquet")
    assert pl.read_parquet(out / "episodes.parquet").equals(ref_episodes)


def test_a_version_4_checkpoint_resumes_with_its_best_as_the_first_validation(tmp_path):
    """Version 4 kept only the best mean, not every validation: the upgrade starts the selection's history
    with it (no per-item rewards), the run resumes and ends as one never stopped (the `max` rule)."""
    reference, out, cfg_old, fingerprint = _stopped_run(tmp_path, 4, generations=6, every=2)
    payload = load_checkpoint(out / "checkpoint.pkl", fingerprint)
    best = {k: payload["best"][k] for k in ("params", "generation", "validation_reward")}
    old = {k: v for k, v in payload.items() if k not in ("validations", "validation_select")}
    save_checkpoint(out / "checkpoint.pkl", {**old, "version": 4, "best": best})

    resumed = run(out, cfg_old)
    assert resumed.resumed and resumed.generations_completed == 6
    assert np.array_equal(resumed.params, reference.params) and resumed.best_generation == reference.best_generation
    upgraded = load_checkpoint(out / "checkpoint.pkl", fingerprint)
    assert upgraded["version"] == CHECKPOINT_VERSION == 5
    history = upgraded["validations"]
    assert history[0]["generation"] == best["generation"] and history[0]["per_item"] is None
    assert [e["generation"] for e in history[1:]] == [5] and history[1]["per_item"] is not None
