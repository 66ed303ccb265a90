"""trinity.config.compose composes the group choices with Hydra once per process and sets the plain values on a copy
(Hydra's own override step): the result must be Hydra's full composition, byte for byte as YAML, for every kind of
override; errors stay errors; and a value never leaks into the next composition of the same groups."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from trinity import config
from trinity.errors import ConfigError


def _hydra(overrides: list[str]):
    """Hydra's composition of all the overrides at once: what compose() gave before it split them."""
    return config.pool_from_recording(config.hydra_composition(overrides))


CASES = [
    [],
    ["experiment=local_live"],
    ["experiment=local_live", "evolve.popsize=4", "protocol.max_turns=2"],
    ["evolve.sigma0=0.07", "experiment=paper"],                                  # a value before the group
    ["experiment=routing_benchmark", "pool/profile=dominant", "tasks.max_items_per_suite=30",
     "tasks.splits={train:0.55,validation:0.35,test:0.1}", "tasks.train=[mmlu,gsm8k]"],   # nested group, mapping, list
    ["experiment=local_live", "pool=local_agents", "pool.sampling.temperature=0.3"],  # a group and a value inside it
    ["experiment=local_live", "+evolve.extra_note=hello", "~eval.min_items"],          # add and delete
    ["experiment=local_live", "++evolve.popsize=9", "seed=3", "paths.cache=/tmp/x"],  # force-add of a key that exists
    ["coordinator=qwen3_0.6b", "coordinator.backbone.dtype=auto", "serve.port=9001"],
    ["experiment=local_live", "evolve.cost_weights=[0.0,0.5]", "eval.methods=[trinity,random]"],
    ["experiment=local_live", "evolve={popsize:5,generations:2}"],                     # a mapping for a group's key
]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o) or "default")
def test_compose_equals_hydras_full_composition(overrides):
    ours = config.compose(overrides, validate_cfg=False)
    theirs = _hydra(overrides)
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs)
    assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(theirs)


@pytest.mark.parametrize("override, needle", [
    ("evolve.no_such_key=1", "evolve.no_such_key"),          # not in the struct config: append with +
    ("+evolve.popsize=3", "evolve.popsize"),                 # add where a value already is
    ("~evolve.no_such_key", "evolve.no_such_key"),           # delete what is not there
    ("experiment=no_such_experiment", "no_such_experiment"),
    ("evolve.popsize=[unclosed", "evolve.popsize"),          # the parser's error
])
def test_an_invalid_override_is_a_config_error_as_before(override, needle):
    with pytest.raises(Exception):   # noqa: B017 (Hydra's own exception types differ by case)
        _hydra(["experiment=local_live", override])
    with pytest.raises(ConfigError) as e:
        config.compose(["experiment=local_live", override])
    assert needle in str(e.value)


def test_groups_are_composed_once_and_values_never_leak(monkeypatch):
    import hydra

    calls = []
    real = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda *a, **k: calls.append(k.get("overrides")) or real(*a, **k))
    config._COMPOSED.clear()
    first = config.compose(["experiment=local_live", "evolve.popsize=4", "+evolve.extra_note=x"], validate_cfg=False)
    second = config.compose(["experiment=local_live", "evolve.popsize=6"])
    plain = config.compose(["experiment=local_live"])
    assert calls == [["experiment=local_live"]]   # one Hydra composition for the three
    assert (first.evolve.popsize, second.evolve.popsize) == (4, 6)
    assert plain.evolve.popsize == _hydra(["experiment=local_live"]).evolve.popsize
    assert "extra_note" not in second.evolve and "extra_note" not in plain.evolve
    plain.evolve.generations = 1   # the caller's copy: the next composition is untouched
    assert config.compose(["experiment=local_live"]).evolve.generations != 1


def test_an_override_of_hydras_own_settings_goes_wholly_to_hydra():
    groups, values = config._split_overrides(config.conf_dir(), ["experiment=paper", "hydra.job.name=x", "seed=2"])
    assert groups == ("experiment=paper", "hydra.job.name=x", "seed=2") and values == []
    groups, values = config._split_overrides(config.conf_dir(), ["seed=2", "experiment=paper", "pool/profile=dominant"])
    assert groups == ("experiment=paper", "pool/profile=dominant")
    assert [v.input_line for v in values] == ["seed=2"]
