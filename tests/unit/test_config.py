"""Configuration: composition, experiments, and clear errors naming the key before any work."""

import pytest

from trinity import config
from trinity.errors import ConfigError


def test_default_is_the_embedded_local_experiment():
    cfg = config.compose()
    # three agents (setups) of the local 1.5B model, on one server
    assert list(cfg.pool.models) == ["qwen-direct", "qwen-steps", "qwen-python"]
    assert {m.asset for m in cfg.pool.models.values()} == {"qwen2.5-coder-1.5b-instruct"}
    assert len({m.port for m in cfg.pool.models.values()}) == 1
    assert cfg.coordinator.backbone.id == "smollm2-135m-instruct"
    assert cfg.evolve.strategy == "sep_cma"
    assert cfg.paths.cache == ".trinity" and cfg.paths.prepared == "data/prepared"   # conf/paths/default.yaml
    # replayed from the committed recording of those agents at K = 3, at the paper's budget shape
    assert cfg.pool.replay.recording == "data/recordings/local-agents" and cfg.pool.replay.on_miss == "error"
    assert cfg.protocol.max_turns == 3
    assert cfg.evolve.popsize is None and cfg.evolve.generations == 60 and cfg.evolve.episodes_per_candidate == 16
    assert list(cfg.coordinator.roles) == list(cfg.record.roles) == ["worker", "verifier"]
    assert cfg.ablations.enabled
    for name, pool in (("local_agents_live", "local_agents"), ("local_live", "local")):
        live = config.compose([f"experiment={name}"])   # the same pipeline on the live servers
        assert "replay" not in live.pool and live.pool.name == pool
        base = cfg if name == "local_agents_live" else config.compose(["experiment=local_small"])
        assert live.protocol == base.protocol and live.tasks == base.tasks
        assert live.evolve.fitness.estimate == "sampled" and live.evolve.generations < base.evolve.generations


def test_paper_experiment_mirrors_the_spec():
    cfg = config.compose(["experiment=paper"])
    assert cfg.evolve.sigma0 == 0.03
    assert cfg.evolve.popsize is None  # ceil(4 + 3 ln n)
    assert cfg.evolve.generations == 60
    assert cfg.evolve.episodes_per_candidate == 16
    assert cfg.protocol.max_turns == 5
    assert cfg.pool.sampling.temperature == 0.1
    assert cfg.coordinator.backbone.id == "Qwen/Qwen3-0.6B"
    assert cfg.evolve.fitness.entropy_weight == 0.15 and cfg.evolve.fitness.turn_weight == 0.10


@pytest.mark.parametrize(
    "override, needle",
    [
        ("pool=does_not_exist", "pool/does_not_exist"),
        ("evolve.budget.max_cost_usd=-1", "evolve.budget.max_cost_usd"),
        ("evolve.sigma0=0", "evolve.sigma0"),
        ("protocol.max_turns=-2", "protocol.max_turns"),
        ("evolve.response_cache=sometimes", "evolve.response_cache"),
        ("runner.kind=ray", "runner.kind"),
        ("tasks.splits.train=0.9", "tasks.splits"),
        ("pool.models.qwen-coder-0.5b.price_in_per_mtok=-3", "pool.models.qwen-coder-0.5b.price_in_per_mtok"),
        ("evolve.popsize=abc", "evolve.popsize"),
        ("coordinator.feature_cache.max_padding=lots", "coordinator.feature_cache.max_padding"),
        ("coordinator.feature_cache.max_padding=-0.5", "coordinator.feature_cache.max_padding"),
        ("coordinator.feature_cache.max_batch=0", "coordinator.feature_cache.max_batch"),
        ("coordinator.feature_cache.prefix_tokens=-1", "coordinator.feature_cache.prefix_tokens"),
    ],
)
def test_invalid_configuration_names_the_key(override, needle):
    with pytest.raises(ConfigError) as e:
        config.compose(["experiment=local_live", override])
    assert needle in str(e.value)


def test_missing_api_key_variable_is_named(monkeypatch):
    cfg = config.load(None, ["experiment=local_live", "pool=openai_example"])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"pool.models.gpt-4.1-mini.api_key_env.*OPENAI_API_KEY"):
        config.check_api_keys(cfg)


def test_params_file_round_trip_and_bad_file(tmp_path):
    cfg = config.compose(["experiment=local_live", "evolve.generations=7"])
    p = tmp_path / "params.yaml"
    p.write_text(config.to_yaml(cfg))
    assert config.load(p).evolve.generations == 7
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("evolve: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(bad)


def test_cli_reports_config_errors_without_traceback(capsys):
    from trinity.cli import main

    assert main(["config", "evolve.generations=-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "evolve.generations" in err and "Traceback" not in err


def test_committed_params_yaml_is_the_composed_default():
    """DVC stages read params.yaml; it must be exactly conf/ composed with the default experiment
    (`make params` rewrites it), so `dvc repro` from a clone runs what conf/ says."""
    committed = (config.REPO_ROOT / "params.yaml").read_text()
    assert committed == config.to_yaml(config.compose(["experiment=local_agents"]))
