"""Compose and validate the Hydra configuration.

Every entry point (CLI, Prefect flows, DVC stages, tests) gets its config here, so invalid
configuration stops with one clear ConfigError naming the key, before any work starts.
DVC stages read the composed `params.yaml`; flows triggered from the Prefect UI compose from
`conf/` with Hydra overrides.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from trinity.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_ENV = "TRINITY_CONF_DIR"


def conf_dir() -> Path:
    """$TRINITY_CONF_DIR, else the checkout's conf/ (editable install, tests), else the copy shipped
    inside the installed package (setup.py puts conf/ there as trinity/conf)."""
    if os.environ.get(CONF_ENV):
        return Path(os.environ[CONF_ENV]).resolve()
    checkout = REPO_ROOT / "conf"
    if (checkout / "config.yaml").is_file():
        return checkout.resolve()
    packaged = Path(__file__).resolve().parent / "conf"
    if (packaged / "config.yaml").is_file():
        return packaged
    raise ConfigError(f"no config folder: neither {checkout} nor {packaged} holds config.yaml; "
                      f"set ${CONF_ENV} to a conf/ folder")


def compose(overrides: Iterable[str] = (), *, validate_cfg: bool = True) -> DictConfig:
    """Compose conf/config.yaml with Hydra overrides (e.g. ``["experiment=paper", "evolve.sigma0=0.05"]``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = list(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise ConfigError(f"invalid configuration {overrides}: {_first_line(e)}") from None
    finally:
        GlobalHydra.instance().clear()
    if validate_cfg:
        validate(cfg)
    return cfg


def load(params: str | os.PathLike | None = None, overrides: Iterable[str] = ()) -> DictConfig:
    """The config of a run: `params` (a composed params.yaml, as DVC stages use) or conf/ + overrides."""
    overrides = list(overrides)
    if params is not None and not overrides:
        path = Path(params)
        if not path.exists():
            raise ConfigError(f"params file {path} does not exist; run `make params` or pass overrides")
        try:
            cfg = OmegaConf.load(path)
        except Exception as e:  # yaml errors come in several types
            raise ConfigError(f"params file {path} is not valid YAML: {_first_line(e)}") from None
        validate(cfg)
        return cfg
    return compose(overrides)


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _get(cfg: DictConfig, key: str) -> Any:
    try:
        return OmegaConf.select(cfg, key, throw_on_missing=True)
    except Exception as e:
        raise ConfigError(f"config key '{key}': {_first_line(e)}") from None


def _require(cfg: DictConfig, key: str) -> Any:
    value = _get(cfg, key)
    if value is None:
        raise ConfigError(f"config key '{key}' is missing")
    return value


def _non_negative(cfg: DictConfig, key: str, *, allow_null: bool = True, positive: bool = False) -> None:
    value = _get(cfg, key)
    if value is None:
        if allow_null:
            return
        raise ConfigError(f"config key '{key}' must be set")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"config key '{key}' must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"config key '{key}' must be {'> 0' if positive else '>= 0'}, got {value}")


def validate(cfg: DictConfig) -> None:
    """Static checks that need no network and start nothing. Raises ConfigError naming the key."""
    _require(cfg, "seed")
    models = _require(cfg, "pool.models")
    if not isinstance(models, DictConfig) or len(models) == 0:
        raise ConfigError("config key 'pool.models' must map at least one model name to its settings")
    for name in models:
        for key in ("price_in_per_mtok", "price_out_per_mtok", "max_concurrency", "requests_per_minute"):
            _non_negative(cfg, f"pool.models.{name}.{key}")
    for key in ("pool.sampling.temperature", "pool.sampling.max_tokens", "pool.sampling.timeout_s"):
        _non_negative(cfg, key)
    for key in ("evolve.budget.max_cost_usd", "evolve.budget.max_tokens", "evolve.budget.max_calls"):
        _non_negative(cfg, key)
    _non_negative(cfg, "evolve.sigma0", allow_null=False, positive=True)
    _non_negative(cfg, "evolve.generations", allow_null=False, positive=True)
    _non_negative(cfg, "evolve.episodes_per_candidate", allow_null=False, positive=True)
    _non_negative(cfg, "evolve.popsize", positive=True)
    _non_negative(cfg, "protocol.max_turns", allow_null=False, positive=True)
    from trinity.pipeline.items import train_items_mode

    train_items_mode(cfg)  # evolve.train_items: resample | fixed
    _validate_throughputs(cfg, models)
    mode = _get(cfg, "evolve.response_cache")
    if mode not in ("off", "read_write", "replay_only"):
        raise ConfigError(f"config key 'evolve.response_cache' must be off|read_write|replay_only, got {mode!r}")
    splits = _require(cfg, "tasks.splits")
    total = sum(float(v) for v in splits.values())
    if abs(total - 1.0) > 1e-6 or any(float(v) < 0 for v in splits.values()):
        raise ConfigError(f"config key 'tasks.splits' must be non-negative fractions summing to 1, got {dict(splits)}")
    kind = _get(cfg, "runner.kind")
    if kind not in ("threads", "dask"):
        raise ConfigError(f"config key 'runner.kind' must be threads|dask, got {kind!r}")
    _validate_training(cfg)
    _validate_ablations(cfg)
    from trinity.evolve.fitness import frontier_cost_unit, frontier_cost_weights

    frontier_cost_weights(cfg)   # evolve.cost_weights (the frontier stage)
    frontier_cost_unit(cfg)


def _validate_throughputs(cfg: DictConfig, models: DictConfig) -> None:
    """Optional `pool.models.<m>.throughput`: {decode_tok_s, prefill_tok_s}, each a number > 0 or null
    (not measured; trinity.evolve.efficiency then leaves the model out of the generation floor)."""
    for name in models:
        key = f"pool.models.{name}.throughput"
        block = _get(cfg, key)
        if block is None:
            continue
        if not isinstance(block, DictConfig):
            raise ConfigError(f"config key '{key}' must map decode_tok_s and prefill_tok_s to tokens/s, got {block!r}")
        unknown = sorted(set(block) - {"decode_tok_s", "prefill_tok_s"})
        if unknown:
            raise ConfigError(f"config key '{key}': unknown keys {unknown}; expected decode_tok_s, prefill_tok_s")
        for rate in ("decode_tok_s", "prefill_tok_s"):
            _non_negative(cfg, f"{key}.{rate}", positive=True)


def _validate_training(cfg: DictConfig) -> None:
    from trinity.evolve.algorithms import ALGORITHMS
    from trinity.routers.base import ROLES

    roles = _get(cfg, "coordinator.roles")
    if roles is not None:
        roles = [str(r) for r in roles]
        if not roles or any(r not in ROLES for r in roles) or len(set(roles)) != len(roles) or "worker" not in roles:
            raise ConfigError(f"config key 'coordinator.roles' must list distinct roles from {list(ROLES)} including "
                              f"worker (only a Worker answers), got {roles}")
    from trinity.coordinator.feature_norm import check_mode

    check_mode(_get(cfg, "coordinator.features.normalize"))  # none | standardize | rebalance; absent = none
    for key in ("memory_items", "prefix_tokens", "max_wait_ms"):
        _non_negative(cfg, f"coordinator.feature_cache.{key}")
    _non_negative(cfg, "coordinator.feature_cache.max_batch", positive=True)
    if _get(cfg, "coordinator.feature_cache") is not None:
        from trinity.coordinator.features.length_buckets import resolve_max_padding

        resolve_max_padding(_get(cfg, "coordinator.feature_cache.max_padding"), "cpu")
    strategy = _get(cfg, "evolve.strategy")
    if strategy is not None and strategy not in ALGORITHMS:
        raise ConfigError(f"config key 'evolve.strategy': unknown strategy {strategy!r}; known: {sorted(ALGORITHMS)}")
    # an on-policy method learns from the head's recorded routing decisions; SVF parameters make none
    if strategy is not None and ALGORITHMS[strategy].kind == "on_policy" and _get(cfg, "coordinator.svf.enabled"):
        raise ConfigError(f"config key 'coordinator.svf.enabled' must be false with evolve.strategy={strategy} "
                          "(policy gradient trains the routing head only)")


def apply_overrides(cfg: DictConfig, overrides: Any, *, where: str) -> DictConfig:
    """A copy of `cfg` with dotted overrides ({"evolve.strategy": "reinforce", ...}) applied. Every key
    must already exist in `cfg`, so a typo is a ConfigError naming `<where>.<key>`, never a silent no-op."""
    out = copy.deepcopy(cfg)
    OmegaConf.set_struct(out, False)
    items = overrides.items() if overrides is not None else []
    for key, value in items:
        key = str(key)
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(out, parent) if parent else out
        if not isinstance(node, DictConfig) or leaf not in node:
            raise ConfigError(f"config key '{where}.{key}': no key '{key}' in the composed config to override")
        OmegaConf.update(out, key, value, merge=False)
    return out


def ablation_variants(cfg: DictConfig) -> dict[str, DictConfig]:
    """The selected ablation variants (`ablations.variants`, in that order) as full configs: the
    composed config with the variant's overrides applied and the `ablations` section removed."""
    ab = _get(cfg, "ablations")
    if ab is None or not ab.get("enabled", False):
        return {}
    definitions = _require(cfg, "ablations.definitions")
    if not isinstance(definitions, DictConfig):
        raise ConfigError("config key 'ablations.definitions' must map variant names to dotted overrides")
    names = ab.get("variants")
    names = list(definitions) if names is None else [str(n) for n in names]
    out: dict[str, DictConfig] = {}
    for name in names:
        if name not in definitions:
            raise ConfigError(f"config key 'ablations.variants': unknown variant {name!r}; defined: {list(definitions)}")
        if name in out:
            raise ConfigError(f"config key 'ablations.variants': {name!r} is listed twice")
        overrides = definitions[name]
        if overrides is not None and not isinstance(overrides, DictConfig):
            raise ConfigError(f"config key 'ablations.definitions.{name}' must map dotted keys to values")
        variant = apply_overrides(cfg, overrides, where=f"ablations.definitions.{name}")
        del variant["ablations"]
        out[name] = variant
    return out


def _validate_ablations(cfg: DictConfig) -> None:
    for name, variant in ablation_variants(cfg).items():
        try:
            validate(variant)
        except ConfigError as e:
            raise ConfigError(f"ablation variant {name!r} (ablations.definitions.{name}): {e}; fix the definition, "
                              "leave the variant out of ablations.variants, or set ablations.enabled=false") from None


def check_api_keys(cfg: DictConfig) -> None:
    """Every pool model that names an API-key variable must find it set (checked before pool work)."""
    for name, model in cfg.pool.models.items():
        env = model.get("api_key_env")
        if env and not os.environ.get(env):
            raise ConfigError(
                f"config key 'pool.models.{name}.api_key_env' names ${env}, which is not set; "
                f"export it (keys are read from the environment only)"
            )
