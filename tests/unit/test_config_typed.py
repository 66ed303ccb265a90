"""One typed config handed down: `trinity.config.load` returns a frozen TrinityConfig that keeps the composed
document it was typed from; derived configs are typed again from a changed copy of that document."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from omegaconf import OmegaConf

from trinity import config
from trinity.config_schema import TrinityConfig
from trinity.errors import ConfigError

OVERRIDES = ["experiment=local_live", "evolve.generations=3", "seed=11"]


def test_load_returns_a_frozen_typed_config_with_its_document():
    cfg = config.load(None, OVERRIDES)
    assert isinstance(cfg, TrinityConfig)
    assert (cfg.seed, cfg.evolve.generations) == (11, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.evolve.generations = 5      # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 1                    # type: ignore[misc]
    assert config.to_yaml(cfg) == OmegaConf.to_yaml(config.compose(OVERRIDES), resolve=True)
    assert config.typed(cfg) is cfg
    assert config.as_written(cfg) == OmegaConf.to_container(config.compose(OVERRIDES), resolve=True)
    assert config.typed(config.compose(OVERRIDES)) == cfg


def test_a_params_file_loads_to_the_same_config(tmp_path):
    composed = config.load(None, OVERRIDES)
    params = tmp_path / "params.yaml"
    params.write_text(config.to_yaml(composed))
    loaded = config.load(params)
    assert loaded == composed and config.to_yaml(loaded) == config.to_yaml(composed)
    with pytest.raises(AttributeError):
        loaded.composed.no_such_group = 1   # struct, as Hydra composes: a new key is an error


def test_derived_configs_are_typed_copies_and_leave_the_original_alone():
    cfg = config.load(None, OVERRIDES)
    more = config.with_values(cfg, {"evolve.generations": 7, "paths.states": "elsewhere/states"})
    assert (more.evolve.generations, more.paths.states) == (7, "elsewhere/states")
    assert (cfg.evolve.generations, cfg.paths.states) == (3, "data/states")
    assert "generations: 7" in config.to_yaml(more) and "generations: 3" in config.to_yaml(cfg)
    strict = config.apply_overrides(cfg, {"evolve.strategy": "random_search"}, where="test")
    assert isinstance(strict, TrinityConfig) and strict.evolve.strategy == "random_search"
    with pytest.raises(ConfigError, match="test.evolve.no_such_key"):
        config.apply_overrides(cfg, {"evolve.no_such_key": 1}, where="test")
    with pytest.raises(ConfigError, match="evolve.generations"):
        config.with_values(cfg, {"evolve.generations": "many"})   # typed again: the schema checks the value


def test_ablation_variants_of_a_typed_config_are_typed():
    cfg = config.load(None, ["experiment=local_live", "ablations.enabled=true"])
    variants = config.ablation_variants(cfg)
    assert variants and all(isinstance(v, TrinityConfig) for v in variants.values())
    assert list(variants) == list(config.ablation_variants(config.compose(["experiment=local_live",
                                                                           "ablations.enabled=true"])))


def test_a_typed_config_pickles_with_its_document():
    cfg = config.load(None, OVERRIDES)
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and config.to_yaml(back) == config.to_yaml(cfg)


def test_a_typed_config_without_a_document_says_so():
    with pytest.raises(ConfigError, match="without a composed document"):
        config.to_yaml(TrinityConfig())


def test_the_evolution_reads_the_typed_config_as_written():
    """The evolution's settings come from the typed config's values, never the schema's defaults (the
    evolution loop's max_turns once came back as the default 5)."""
    from trinity.pipeline.evolution_inputs import evolution_settings

    cfg = config.load(None, [*OVERRIDES, "protocol.max_turns=2", "coordinator.routing=argmax"])
    assert TrinityConfig().protocol.max_turns != 2
    settings = evolution_settings(cfg)
    assert (settings.max_turns, settings.routing, settings.evolve) == (2, "argmax", cfg.evolve)


def test_the_pool_section_knows_which_keys_its_config_wrote():
    cfg = config.load(None, ["pool=local"])
    model = next(iter(cfg.pool.models.values()))
    assert "n_threads" in model.written and "simulated" not in model.written   # a local server, no profile
    assert "models" in cfg.pool.written and "replay" not in cfg.pool.written
    simulated = config.load(None, ["pool=simulated"])
    assert all("n_threads" not in m.written for m in simulated.pool.models.values())
    assert TrinityConfig().pool.written == ()
