"""Champion and challenger (trinity.models.gate, trinity.pipeline.retrain_stage): the challenger replaces
the champion only when the paired test says it is better on the same items; otherwise the champion
stays and the registry says why; a pool change maps the champion's head by model name."""

from __future__ import annotations

import numpy as np
import pytest
from config_support import typed_config

from trinity.config import with_values
from trinity.config_schema import section
from trinity.config_schema.root import Retrain
from trinity.coordinator.saved import CoordinatorMismatchError, load_saved, save_params
from trinity.episodes.trace import EpisodeId, Trace
from trinity.errors import ConfigError
from trinity.models.gate import GateRule, decide
from trinity.models.store import ModelRegistry
from trinity.pipeline import retrain_stage
from trinity.tasks.types import TaskItem

D = 2
ITEMS = [TaskItem("toy", str(i), f"question {i}", None) for i in range(40)]


# ------------------------------------------------------------------------------------------------- the rule
def test_paired_test_rule_promotes_only_a_significant_win():
    rule = GateRule()
    better, worse = [1.0] * 30 + [0.0] * 10, [0.0] * 30 + [0.0] * 10
    assert decide(better, worse, rule).promote
    kept = decide(worse, better, rule)
    assert not kept.promote and kept.reason.startswith("the challenger is worse than the champion")
    slight = decide([1.0] * 22 + [0.0] * 18, [1.0] * 20 + [0.0] * 20, rule)
    assert not slight.promote and "not significantly" in slight.reason
    few = decide([1.0] * 10, [0.0] * 10, rule)
    assert not few.promote and "too few paired items" in few.reason
    assert decide([0.0], None, rule).promote                       # no champion yet
    assert decide(worse, better, GateRule("always")).promote
    assert not decide(better, worse, GateRule("never")).promote
    assert decide(better, worse, rule).test.test == "mcnemar"
    assert decide([0.9] * 30, [0.1] * 30, rule).test.test == "sign_flip"


def test_rule_comes_from_config_and_bad_values_name_the_key():
    written = {"promote_rule": "always", "alpha": 0.01, "min_items": 5}
    assert GateRule.from_config(section(written, Retrain, "retrain")) == GateRule("always", 0.01, 5)
    assert GateRule.from_config(section(None, Retrain, "retrain")) == GateRule()
    for key, value in (("promote_rule", "sometimes"), ("alpha", 2), ("min_items", 0)):
        with pytest.raises(ConfigError, match=f"retrain.{key}"):
            GateRule.from_config(section({key: value}, Retrain, "retrain"))


# ------------------------------------------------------------------------------------------ the step
class FakeCoordinator:
    """Reads saved parameters like Coordinator.read_params (refusing another pool); params[0] of the
    agent rows is the coordinator's 'quality': it answers item i right when i % 10 < 10 * quality."""

    def __init__(self, pool):
        self.pool = list(pool)

    def metadata(self):
        return {"backbone_id": "b", "backbone_revision": "r", "hidden_size": D, "pool_models": self.pool,
                "svf_matrices": [], "num_params": (len(self.pool) + 3) * D}

    def read_params(self, path):
        params, meta, _ = load_saved(path)
        if meta["pool_models"] != self.pool:
            raise CoordinatorMismatchError(f"pool_models: saved {meta['pool_models']}, configured {self.pool}")
        return params


class FakeContext:
    def __init__(self, pool):
        self.coordinator = FakeCoordinator(pool)
        self.runs = []

    def run_candidate(self, params, items, *, generation, candidate, mode=None):
        self.runs.append((candidate, mode, len(items)))
        quality = float(np.asarray(params)[0])
        return [Trace(EpisodeId(generation, candidate, it.uid, 0), 0, [], final_answer="x",
                      reward=1.0 if int(it.uid.split("/")[1]) % 10 < round(10 * quality) else 0.0,
                      end_reason="accept") for it in items]


def save(folder, pool, quality, **meta):
    params = np.zeros((len(pool) + 3) * D)
    params[0] = quality
    save_params(folder / "coordinator.safetensors", params,
                {"backbone_id": "b", "backbone_revision": "r", "hidden_size": D, "pool_models": list(pool),
                 "svf_matrices": [], "num_params": params.size, "validation_reward": quality, **meta})
    return folder


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setattr(retrain_stage, "gate_items", lambda cfg: ITEMS)
    return typed_config({
        "seed": 0, "paths": {"registry": str(tmp_path / "models"), "prepared": str(tmp_path / "prepared"),
                             "runs": str(tmp_path / "evolve")},
        "pool": {"models": {"a": {}, "b": {}}}, "coordinator": {"backbone": {"id": "b"}, "routing": "argmax"},
        "tasks": {"train": ["toy"]}, "retrain": {"promote_rule": "paired_test", "alpha": 0.05, "min_items": 20}})


def test_first_run_promotes_then_a_worse_challenger_keeps_the_champion_and_a_better_one_replaces_it(cfg, tmp_path):
    reg = ModelRegistry(cfg.paths.registry)
    first = retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r1", "ab", 0.5), source_run="run-1",
                              runtime=FakeContext("ab"))
    assert first["promoted"] and reg.champion_name() == "v1" and first["reason"].startswith("no champion yet")

    ctx = FakeContext("ab")
    worse = retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r2", "ab", 0.1), source_run="run-2", runtime=ctx)
    assert not worse["promoted"] and reg.champion_name() == "v1" and worse["version"] == "v2"
    assert worse["reason"].startswith("the challenger is worse than the champion")
    assert ctx.runs == [(0, "argmax", 40), (1, "argmax", 40)]    # both on the same items, the configured routing
    assert reg.history()[-1]["action"] == "keep" and reg.history()[-1]["reason"] == worse["reason"]
    assert "not promoted; the champion stays" in worse["markdown"] and "| 0 | 16 |" in worse["markdown"]
    meta = reg.show("v2").meta
    assert meta["parent"] == "v1" and meta["metrics"]["test_reward"] == pytest.approx(0.1)
    assert meta["metrics"]["champion_test_reward"] == pytest.approx(0.5) and meta["gate"]["promote"] is False
    assert meta["source_run"] == "run-2" and len(meta["config_sha256"]) == 64

    better = retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r3", "ab", 0.9), source_run="run-3",
                               runtime=FakeContext("ab"))
    assert better["promoted"] and reg.champion_name() == "v3" and better["previous_champion"] == "v1"
    assert "Retraining: v3 promoted" in better["markdown"] and "| 16 | 0 |" in better["markdown"]


def test_a_pool_change_runs_the_champion_with_rows_mapped_by_name(cfg, tmp_path):
    reg = ModelRegistry(cfg.paths.registry)
    retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r1", "ab", 0.5), runtime=FakeContext("ab"))
    cfg = with_values(cfg, {"pool.models": {"a": {}, "b": {}, "c": {}}})
    out = retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r2", "abc", 0.9), runtime=FakeContext("abc"))
    assert out["promoted"] and reg.champion_name() == "v2"
    assert any("mapped by model name" in n and "new models (rows start at 0): c" in n for n in out["notes"])
    assert "pool: a b -> a b c (added c)" in out["differs"]
    assert "pool: a b -> a b c (added c)" in out["markdown"]


def test_a_failed_evaluation_never_touches_the_registry(cfg, tmp_path):
    reg = ModelRegistry(cfg.paths.registry)
    retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r1", "ab", 0.5), runtime=FakeContext("ab"))
    before = (tmp_path / "models" / "registry.json").read_bytes()

    class Broken(FakeContext):
        def run_candidate(self, *a, **kw):
            raise KeyboardInterrupt("interrupted mid-evaluation")

    with pytest.raises(KeyboardInterrupt):
        retrain_stage.run(cfg, coordinator_path=save(tmp_path / "r2", "ab", 0.9), runtime=Broken("ab"))
    assert (tmp_path / "models" / "registry.json").read_bytes() == before
    assert [v.name for v in reg.list()] == ["v1"] and reg.champion_name() == "v1"


def test_paired_rewards_pair_items_not_repeats():
    from types import SimpleNamespace

    from trinity.pipeline.retrain_stage import paired_rewards

    def traces(rewards):   # item i, repeats 0..2, the same reward each time (a replayed reply)
        return [SimpleNamespace(episode=SimpleNamespace(item=f"q{i}", repeat=k), reward=r)
                for i, r in enumerate(rewards) for k in range(3)]

    mine, theirs = paired_rewards(traces([1.0, 0.0, 1.0]), traces([0.0, 0.0, 1.0])[:-1])
    # three items; the champion's last item lost one repeat: only the repeats both ran are averaged
    assert mine == [1.0, 0.0, 1.0] and theirs == [0.0, 0.0, 1.0]
