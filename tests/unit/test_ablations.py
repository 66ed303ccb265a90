"""The ablate stage: variant configs and their validation, and a disabled stage's empty outputs. The
stage end to end on a scripted pool: tests/integration/test_ablations_run.py."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from trinity import config
from trinity.errors import ConfigError


def _with_definition(cfg, name, overrides):
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.ablations.definitions[name] = overrides
    cfg.ablations.variants = [name]
    return cfg


def test_unknown_override_key_unknown_variant_and_invalid_variant_are_named():
    cfg = config.compose(["experiment=local_live", "ablations.enabled=true"])
    with pytest.raises(ConfigError, match=r"ablations\.definitions\.typo\.evolve\.sigam0"):
        config.validate(_with_definition(cfg, "typo", {"evolve.sigam0": 0.1}))
    with pytest.raises(ConfigError, match=r"ablations\.definitions\.deep\.coordinator\.svf\.nope"):
        config.validate(_with_definition(cfg, "deep", {"coordinator.svf.nope": True}))
    with pytest.raises(ConfigError, match=r"ablations\.variants.*'nope'"):
        config.compose(["experiment=local_live", "ablations.enabled=true", "ablations.variants=[nope]"])
    with pytest.raises(ConfigError, match=r"ablation variant 'both'.*coordinator\.svf\.enabled"):
        config.validate(_with_definition(cfg, "both", {"evolve.strategy": "reinforce", "coordinator.svf.enabled": True,
                                                       "coordinator.svf.matrices": ["lm_head"]}))
    with pytest.raises(ConfigError, match=r"ablation variant 'roles'.*coordinator\.roles"):
        config.validate(_with_definition(cfg, "roles", {"coordinator.roles": ["thinker"]}))
    assert config.ablation_variants(config.compose(["experiment=local_live", "ablations.enabled=false"])) == {}


def test_disabled_stage_writes_empty_outputs(tmp_path):
    from trinity.pipeline import ablate_stage

    cfg = config.with_values(config.load(None, ["experiment=local_live", "ablations.enabled=false",
                                                f"paths.metrics={tmp_path}/m", f"paths.data={tmp_path}/d"]),
                             {"paths.ablations": f"{tmp_path}/d/ablations"})
    out = ablate_stage.run(cfg, evolve=lambda *a, **k: pytest.fail("nothing to train"))
    assert out["metrics"] == {"enabled": False, "variants": {}}
    assert (tmp_path / "d" / "ablations").is_dir() and (tmp_path / "m" / "ablations.json").exists()


def test_the_budget_counts_the_validation_items_there_are(tmp_path):
    """`evolve.validation.n_items` is a cap: with fewer validation items prepared, the budget (metrics/ablations.json,
    the report's description of each variant) counts the items evolution validates on, not the cap."""
    from recording_support import SUITE, write_prepared

    from trinity.pipeline import ablate_stage

    write_prepared(tmp_path / "prepared", {"train": 4, "validation": 3, "test": 2})
    base = ["experiment=local_live", f"tasks.train=[{SUITE}]", "tasks.transfer=[]",
            f"paths.prepared={tmp_path}/prepared",
            "evolve.generations=4", "evolve.validation.every=2"]
    capped = ablate_stage.budget(config.typed(config.compose(base + ["evolve.validation.n_items=64"])), popsize=5)
    assert capped["validation_items"] == 3
    # x0 and the validations after generations 2 and 4, each with both routing modes
    assert capped["validation_episodes"] == 3 * 2 * 3
    fewer = ablate_stage.budget(config.typed(config.compose(base + ["evolve.validation.n_items=2"])), popsize=5)
    assert fewer["validation_items"] == 2 and fewer["validation_episodes"] == 3 * 2 * 2
