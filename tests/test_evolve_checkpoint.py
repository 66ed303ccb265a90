"""Checkpoint files: round trip, corrupt and mismatched checkpoints, and the ways to start over."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from evolve_fixture import run, toy_cfg
from trinity.errors import TrinityError
from trinity.evolve.checkpoint import (MAGIC, capture_rng, config_fingerprint, load_checkpoint, restore_rng,
                                       save_checkpoint)
from trinity.evolve.errors import CheckpointError


def test_round_trip_and_rng_state(tmp_path):
    np.random.seed(7)
    payload = {"fingerprint": "abc", "x": np.arange(5.0), "rows": [{"a": 1}], "rng": capture_rng()}
    save_checkpoint(tmp_path / "ck.pkl", payload)
    expected = np.random.rand(3)
    loaded = load_checkpoint(tmp_path / "ck.pkl", "abc")
    assert np.array_equal(loaded["x"], payload["x"]) and loaded["rows"] == payload["rows"]
    restore_rng(loaded["rng"])
    assert np.array_equal(np.random.rand(3), expected)
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
                       ("pool.models.alpha", {"price": 1}), ("coordinator.head", "svf")]:
        changed = cfg.copy()
        OmegaConf.update(changed, key, value, merge=False)
        assert config_fingerprint(changed, 18) != fp, key
    same = cfg.copy()
    OmegaConf.update(same, "evolve.budget.max_calls", 10)
    OmegaConf.update(same, "evolve.resume", False)
    OmegaConf.update(same, "paths.metrics", "elsewhere")
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

    cfg = toy_cfg(generations=2, tmp=tmp_path)
    cfg.evolve.resume = False
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
