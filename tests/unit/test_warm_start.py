"""Warm start (trinity.coordinator.warm_start, evolve.warm_start): a saved coordinator's parameters as
x0 of a new run, the head's agent rows following the pool models by name."""

from __future__ import annotations

import numpy as np
import pytest
from config_support import typed_config
from evolve_fixture import run, toy_cfg

from trinity.config import with_values
from trinity.coordinator.saved import CoordinatorMismatchError
from trinity.coordinator.warm_start import map_params
from trinity.errors import TrinityError
from trinity.evolve.errors import CheckpointError

D = 4


def meta(models, svf=(), **kw):
    return {"backbone_id": "b", "backbone_revision": "r", "hidden_size": D, "pool_models": list(models),
            "svf_matrices": [list(s) for s in svf],
            "num_params": sum(n for _, n in svf) + (len(models) + 3) * D, **kw}


def saved_params(models, svf_size=0):
    """Row r of the head is filled with 10 * (r + 1) so rows can be told apart; SVF offsets 0.5, 1.5, ..."""
    head = np.repeat(10.0 * (np.arange(len(models) + 3) + 1)[:, None], D, axis=1)
    return np.concatenate([np.arange(svf_size) + 0.5, head.ravel()])


def test_rows_follow_models_by_name_new_rows_zero_removed_dropped():
    old = ["a", "b", "c"]
    new = ["c", "a", "z"]              # b removed, z added, a and c reordered
    warm = map_params(saved_params(old), meta(old), meta(new), source="champion v3")
    head = warm.x0.reshape(len(new) + 3, D)
    assert head[0].tolist() == [30.0] * D          # c: old row 2
    assert head[1].tolist() == [10.0] * D          # a: old row 0
    assert head[2].tolist() == [0.0] * D           # z: new, zero
    assert head[3:].tolist() == [[40.0] * D, [50.0] * D, [60.0] * D]   # the role rows, unchanged
    assert warm.kept == (("c", 2, 0), ("a", 0, 1)) and warm.added == ("z",) and warm.removed == ("b",)
    lines = warm.lines()
    assert lines[0] == "warm start from champion v3: 2 model rows kept by name, moved: c (row 2 -> 0), a (row 0 -> 1)"
    assert lines[1:] == ["new models (rows start at 0): z", "removed models (rows dropped): b"]
    assert warm.report()["added"] == ["z"] and len(warm.report()["x0_sha256"]) == 16


def test_same_pool_is_the_same_vector_and_svf_offsets_carry_over():
    svf = [("layer.0", 2), ("layer.1", 3)]
    params = saved_params(["a", "b"], svf_size=5)
    warm = map_params(params, meta(["a", "b"], svf), meta(["a", "b"], svf))
    assert np.array_equal(warm.x0, params) and warm.added == () and warm.removed == ()
    grown = map_params(params, meta(["a", "b"], svf), meta(["a", "b", "c"], svf))
    assert grown.x0[:5].tolist() == [0.5, 1.5, 2.5, 3.5, 4.5] and grown.x0.size == 5 + 6 * D


@pytest.mark.parametrize("change", [{"backbone_id": "other"}, {"hidden_size": D + 1}, {"backbone_revision": "r2"}])
def test_another_backbone_is_refused_naming_the_key(change):
    with pytest.raises(CoordinatorMismatchError, match=f"cannot warm-start.*{next(iter(change))}"):
        map_params(saved_params(["a"]), meta(["a"]), {**meta(["a"]), **change})


def test_other_svf_matrices_or_a_short_vector_are_refused():
    with pytest.raises(CoordinatorMismatchError, match="svf_matrices"):
        map_params(saved_params(["a"]), meta(["a"]), meta(["a"], [("layer.0", 2)]))
    with pytest.raises(CoordinatorMismatchError, match="do not fit"):
        map_params(saved_params(["a"])[:-1], meta(["a"]), meta(["a"]))


def test_the_loop_starts_from_x0_and_keys_its_checkpoint_on_it(tmp_path):
    """A run warm-started from a trained mean validates that mean as generation -1 (its x0) and keeps it
    unless beaten; its checkpoint is another run's than the cold one, and a different x0 never resumes it."""
    cfg = toy_cfg(generations=4, every=2, tmp=tmp_path)
    cold = run(tmp_path / "cold", cfg)
    assert cold.best_validation_reward > cold.x0_validation_reward
    warm = run(tmp_path / "warm", cfg, x0=cold.params, sigma0=0.05)
    assert warm.x0_validation_reward == cold.best_validation_reward
    assert warm.best_validation_reward >= cold.best_validation_reward
    with pytest.raises(CheckpointError):
        run(tmp_path / "warm", cfg, x0=np.zeros_like(cold.params))
    with pytest.raises(TrinityError, match="x0 has"):
        run(tmp_path / "other", cfg, x0=np.zeros(3))


def test_evolve_warm_start_resolves_the_champion_or_a_path(tmp_path):

    from trinity.errors import ConfigError
    from trinity.models.store import ModelRegistry
    from trinity.pipeline.evolve_stage import run_dir, warm_start_source

    cfg = typed_config({"seed": 0, "paths": {"registry": str(tmp_path / "models"), "cache": str(tmp_path / "c")},
                        "evolve": {"warm_start": None}})
    assert warm_start_source(cfg) is None
    cold_dir = run_dir(cfg)
    cfg = with_values(cfg, {"evolve.warm_start": "champion"})
    assert warm_start_source(cfg) is None            # no champion yet: a cold start
    folder = tmp_path / "trained"
    folder.mkdir()
    (folder / "coordinator.safetensors").write_bytes(b"x")
    reg = ModelRegistry(tmp_path / "models")
    reg.promote(reg.register(folder).name, "first")
    assert warm_start_source(cfg) == tmp_path / "models" / "versions" / "v1" / "coordinator.safetensors"
    assert run_dir(cfg) != cold_dir
    cfg = with_values(cfg, {"evolve.warm_start": str(folder)})
    assert warm_start_source(cfg) == folder / "coordinator.safetensors"
    cfg = with_values(cfg, {"evolve.warm_start": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="evolve.warm_start"):
        warm_start_source(cfg)
