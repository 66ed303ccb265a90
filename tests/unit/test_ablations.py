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


def _typed_without_document(variant):
    import dataclasses

    from trinity.config_schema import conform

    return dataclasses.replace(conform(variant), composed=None)


@pytest.mark.parametrize("experiment", ["local_agents", "paper", "routing_benchmark", "local_live"])
def test_the_resolved_variants_are_the_ablation_variants(experiment):
    """Validation types each variant from one resolved copy of the config (resolved_variants); what it checks must
    be the variant `ablation_variants` makes by copying the OmegaConf tree, field for field."""
    cfg = config.compose([f"experiment={experiment}", "ablations.enabled=true"], validate_cfg=False)
    fast, slow = config.resolved_variants(cfg), config.ablation_variants(cfg)
    assert list(fast) == list(slow) and fast
    for name in fast:
        assert fast[name] is not None, name
        assert _typed_without_document(fast[name]) == _typed_without_document(slow[name]), name


def test_a_variant_whose_override_an_interpolation_reads_is_made_the_slow_way():
    """pool.state_dir reads ${paths.cache}: a variant that overrides paths.cache changes it, which a copy resolved
    before the override cannot show, so that variant is left to ablation_variants (and still validated)."""
    cfg = _with_definition(config.compose(["experiment=local_live", "ablations.enabled=true"], validate_cfg=False),
                           "moved", {"paths.cache": "/elsewhere", "evolve.sigma0": 0.05})
    assert "${paths.cache}" in OmegaConf.to_yaml(cfg.pool)
    assert config.resolved_variants(cfg) == {"moved": None}
    (variant,) = config.ablation_variants(cfg).values()
    assert _typed_without_document(variant).pool.state_dir.startswith("/elsewhere")
    config.validate(cfg)
    with pytest.raises(ConfigError, match=r"ablation variant 'moved'.*evolve\.sigma0"):
        config.validate(_with_definition(cfg, "moved", {"paths.cache": "/elsewhere", "evolve.sigma0": -1.0}))
    # the same bad value where no interpolation reads it: refused by the resolved copy, in the same words
    with pytest.raises(ConfigError, match=r"ablation variant 'plain'.*evolve\.sigma0"):
        config.validate(_with_definition(cfg, "plain", {"evolve.sigma0": -1.0}))


@pytest.mark.parametrize("setting,replayed,cpus,variants,expected", [
    (None, True, 2, 6, 2),      # a replayed pool: one process per CPU
    (None, True, 8, 3, 3),      # never more than the variants
    (None, False, 8, 6, 1),     # a live pool: its servers are shared, one variant at a time
    (4, False, 2, 6, 4),        # the setting wins
    (3, True, 2, 1, 1),
])
def test_variant_workers(monkeypatch, setting, replayed, cpus, variants, expected):
    from trinity.config import with_values
    from trinity.pipeline import variants as variants_module

    cfg = config.load(None, ["experiment=local_live"] if not replayed else [])
    assert (cfg.pool.replay is not None) == replayed
    cfg = with_values(cfg, {"runner.variant_workers": setting})
    monkeypatch.setattr(variants_module, "usable_cpus", lambda: cpus)
    assert variants_module.variant_workers(cfg, variants) == expected
