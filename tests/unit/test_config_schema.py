"""The typed schema (trinity.config_schema): a typo, a wrong type, a choice outside its enum or a number
out of range in a params.yaml or a composed config is one ConfigError naming the full key; readers get
the schema's defaults for what a section leaves out, so code holds no defaults of its own."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from omegaconf import OmegaConf

from trinity import config
from trinity.config_schema import TrinityConfig, choice, conform, omegaconf_reference, section
from trinity.config_schema.choices import ResponseCacheMode, RoutingMode
from trinity.config_schema.pool import Retry
from trinity.errors import ConfigError


def _params_with(tmp_path, edit) -> str:
    data = OmegaConf.to_container(config.compose(["experiment=local_live"]), resolve=False)
    edit(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("edit, needles", [
    (lambda d: d["evolve"].__setitem__("sigmo", 0.1), ["'evolve.sigmo' is not a known key", "did you mean 'sigma0'"]),
    (lambda d: d["pool"]["models"]["smollm2-135m"].__setitem__("prot", 1), ["pool.models.smollm2-135m.prot"]),
    (lambda d: d.__setitem__("sede", 1), ["'sede' is not a known key", "did you mean 'seed'"]),
    (lambda d: d["evolve"].__setitem__("train_items", "sometimes"), ["evolve.train_items", "resample|fixed"]),
    (lambda d: d["serve"].__setitem__("port", 70000), ["serve.port", "<= 65535"]),
    (lambda d: d["coordinator"]["backbone"].__setitem__("dtype", "int3"), ["coordinator.backbone.dtype"]),
    (lambda d: d["evolve"].__setitem__("cost_weights", [0, -1]), ["evolve.cost_weights[1]", ">= 0"]),
    (lambda d: d["evolve"].__setitem__("cost_weights", [2, 2]), ["evolve.cost_weights", "twice"]),
    (lambda d: d["tasks"].__setitem__("train", ["mmlu", "nosuchsuite"]), ["tasks.train", "nosuchsuite"]),
    (lambda d: d["eval"].__setitem__("sets", ["test", "holdout"]), ["eval.sets"]),
    (lambda d: d["protocol"].__setitem__("thought_format", "no placeholders"), ["protocol.thought_format", "{n}"]),
    (lambda d: d["protocol"].__setitem__("max_tokens", {"planner": 5}), ["protocol.max_tokens", "planner"]),
    (lambda d: d["serve"]["roles"].__setitem__("boss", {"allow": None, "deny": []}), ["serve.roles.boss"]),
    (lambda d: d["pool"]["models"]["smollm2-135m"]["throughput"].__setitem__("decode_tok_s", 0),
     ["pool.models.smollm2-135m.throughput.decode_tok_s", "> 0"]),
])
def test_a_bad_params_file_is_refused_naming_the_key(tmp_path, edit, needles):
    path = _params_with(tmp_path, edit)
    with pytest.raises(ConfigError) as e:
        config.load(path)
    for needle in needles:
        assert needle in str(e.value)


def test_a_loaded_params_file_is_in_struct_mode(tmp_path):
    cfg = config.load(_params_with(tmp_path, lambda d: None))
    with pytest.raises(AttributeError):
        cfg.evolve.sigmo = 1   # a key the config lacks is an error, not a new key
    assert cfg.evolve.sigma0 == config.compose(["experiment=local_live"]).evolve.sigma0


def test_every_composed_key_has_a_schema_field_and_the_typed_config_matches_it():
    cfg = config.compose(["experiment=routing_benchmark"])
    typed = config.validate(cfg)
    assert isinstance(typed, TrinityConfig)
    assert typed.evolve.response_cache is ResponseCacheMode(cfg.evolve.response_cache)
    for name, model in cfg.pool.models.items():
        assert typed.pool.models[name].price_in_per_mtok == model.price_in_per_mtok
    assert list(typed.pool.models) == list(cfg.pool.models)
    assert typed.tasks.splits.test == cfg.tasks.splits.test


def test_the_composed_config_is_left_as_written():
    """Validation fills nothing in: params.yaml and DVC's parameter hashes do not change with the schema."""
    cfg = config.compose(["experiment=local_live"])
    before = OmegaConf.to_yaml(cfg)
    config.validate(cfg)
    assert OmegaConf.to_yaml(cfg) == before
    assert "retry" not in cfg.pool   # absent in conf/: the schema's defaults apply when it is read


def test_sections_fill_absent_keys_from_the_schema_and_readers_use_them():
    from trinity.config_schema.evolve import BudgetLimits, Fitness
    from trinity.config_schema.pool import PoolConfig
    from trinity.pool.budget import Budget
    from trinity.pool.client import PoolClient

    assert dataclasses.asdict(section(None, Retry, "pool.retry")) == dataclasses.asdict(Retry())
    assert section({"max_retries": 9}, Retry, "pool.retry").max_retries == 9
    models = {"m": {"model_id": "m", "base_url": "http://127.0.0.1:9/v1", "provider": "llamacpp"}}
    assert PoolClient.from_config(section({"models": models}, PoolConfig, "pool")).retry == Retry()
    retried = section({"models": models, "retry": {"max_retries": 9}}, PoolConfig, "pool")
    assert PoolClient.from_config(retried).retry.max_retries == 9
    with pytest.raises(ConfigError, match=r"pool\.retry\.jitter"):
        section({"models": models, "retry": {"jitter": 2}}, PoolConfig, "pool")
    assert section({}, Fitness, "evolve.fitness") == Fitness()
    with pytest.raises(ConfigError, match=r"evolve\.fitness\.cost_unit"):
        section({"cost_unit": "euro"}, Fitness, "evolve.fitness")
    assert Budget.from_config(section(None, BudgetLimits, "evolve.budget")).max_calls is None
    with pytest.raises(ConfigError, match=r"evolve\.budget\.max_calls"):
        section({"max_calls": -5}, BudgetLimits, "evolve.budget")


def test_a_section_refuses_an_unknown_key_with_its_full_key():
    with pytest.raises(ConfigError, match=r"'pool\.retry\.max_retrys' is not a known key.*max_retries"):
        section({"max_retrys": 3}, Retry, "pool.retry")


def test_choice_names_the_key_and_the_allowed_values():
    assert choice(RoutingMode, "argmax", "coordinator.routing") is RoutingMode.argmax
    with pytest.raises(ConfigError, match=r"'coordinator\.routing' must be one of sample\|argmax, got 'best'"):
        choice(RoutingMode, "best", "coordinator.routing")


def test_rules_between_keys():
    with pytest.raises(ConfigError, match=r"coordinator\.svf\.enabled.*reinforce"):
        config.validate(config.compose(["experiment=local_live", "evolve=reinforce", "coordinator.svf.enabled=true"],
                                       validate_cfg=False))
    with pytest.raises(ConfigError, match=r"coordinator\.roles.*worker"):
        conform(config.compose(["experiment=local_live", "coordinator.roles=[thinker]"], validate_cfg=False))


@pytest.mark.parametrize("overrides", [["experiment=local_small"], ["experiment=routing_benchmark"],
                                       ["experiment=paper"], ["experiment=local_agents"],
                                       ["pool=openai_compatible_example"],
                                       ["evolve=reinforce", "coordinator.svf.enabled=false"],
                                       ["serve.roles={thinker: {deny: [a]}}"]])
def test_the_schema_walk_builds_what_omegaconf_structured_configs_build(overrides):
    cfg = config.compose(overrides, validate_cfg=False)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert conform(cfg) == omegaconf_reference(container)


def test_the_schema_walk_converts_scalars_as_omegaconf_does_and_names_the_key():
    from trinity.config_schema.coordinator import CoordinatorConfig
    from trinity.config_schema.pool import PoolConfig, PoolModel
    from trinity.config_schema.root import Ablations, Paths, Runner
    from trinity.config_schema.tasks import TasksConfig

    retry = section({"max_retries": "4", "backoff_base_s": 2, "jitter": "0.5"}, Retry, "pool.retry")
    assert retry.max_retries == 4 and isinstance(retry.backoff_base_s, float) and retry.jitter == 0.5
    assert section({"routing": "argmax", "backbone": {"id": "b"}}, CoordinatorConfig, "coordinator").routing \
        is RoutingMode.argmax
    assert section({"enabled": "yes"}, Ablations, "ablations").enabled is True
    assert section({"cache": 7}, Paths, "paths").cache == "7"
    model = {"model_id": "m", "base_url": "http://127.0.0.1:9/v1", "provider": "llamacpp"}
    assert isinstance(section({"models": {"m": model}}, PoolConfig, "pool").models["m"], PoolModel)
    with pytest.raises(ConfigError, match=r"'pool\.retry\.max_retries'.*'many'.*Integer"):
        section({"max_retries": "many"}, Retry, "pool.retry")
    with pytest.raises(ConfigError, match=r"'pool\.retry\.max_retries'.*Integer"):
        section({"max_retries": 2.5}, Retry, "pool.retry")
    with pytest.raises(ConfigError, match=r"'ablations\.enabled'.*not a valid bool"):
        section({"enabled": "maybe"}, Ablations, "ablations")
    with pytest.raises(ConfigError, match=r"'runner\.max_workers' must not be null"):
        section({"max_workers": None}, Runner, "runner")
    with pytest.raises(ConfigError, match=r"'tasks\.train' must be a list"):
        section({"train": "mmlu"}, TasksConfig, "tasks")
    with pytest.raises(ConfigError, match=r"'pool\.models\.m\.prot' is not a known key"):
        section({"models": {"m": {**model, "prot": 1}}}, PoolConfig, "pool")
    with pytest.raises(ConfigError, match=r"'coordinator\.backbone\.id' is mandatory"):
        section({"backbone": {"source": "hf"}}, CoordinatorConfig, "coordinator")


def test_a_partial_mapping_merges_onto_the_fields_default_as_omegaconf_merges():
    """Keys a mapping leaves out keep the values of the field's own default (a non-empty dict, a nested
    dataclass), as a merge of the config onto the schema keeps them."""
    from trinity.config_schema.root import Retrain
    from trinity.config_schema.serve import ServeConfig

    reference = omegaconf_reference({"retrain": {"new_items": {"train": 3}}, "serve": {"limits": {"max_tokens": 9}},
                                  "coordinator": {"backbone": {"id": "b"}}})
    retrain = section({"new_items": {"train": 3}}, Retrain, "retrain")
    assert retrain.new_items == {"train": 3, "validation": 0, "test": 0} == reference.retrain.new_items
    serve = section({"limits": {"max_tokens": 9}}, ServeConfig, "serve")
    assert serve.limits.max_tokens == 9 and serve.limits.max_turns is None and serve == reference.serve
