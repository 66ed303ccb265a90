"""Compose and validate the Hydra configuration.

Every entry point (CLI, Prefect flows, DVC stages, tests) gets its config here, so invalid
configuration stops with one clear ConfigError naming the key, before any work starts.
DVC stages read the composed `params.yaml`; flows triggered from the Prefect UI compose from
`conf/` with Hydra overrides.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast, overload

from omegaconf import DictConfig, OmegaConf

from trinity.config_schema import TrinityConfig, conform
from trinity.config_schema import typed as typed  # the edges type a composed document with trinity.config.typed
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
    """Compose conf/config.yaml with Hydra overrides (e.g. ``["experiment=paper", "evolve.sigma0=0.05"]``).

    Hydra composes the config groups the overrides choose (experiment, pool, ...) and then sets the plain
    values (``evolve.sigma0=0.05``) on the result. The first part is the costly one (0.2-0.4 s: the defaults
    tree, every file read and merged), and depends on the group choices alone, so it is done once per choice
    of groups in a process and copied; the values are then set on the copy by Hydra's own code for that step,
    as Hydra would set them (same parser, same order, same errors)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = list(overrides)
    folder = conf_dir()
    try:
        groups, values = _split_overrides(folder, overrides)
        cfg = _composed(folder, groups)
        if values:
            from hydra._internal.config_loader_impl import ConfigLoaderImpl

            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise ConfigError(f"invalid configuration {overrides}: {_first_line(e)}") from None
    cfg = pool_from_recording(cfg)
    if validate_cfg:
        validate(cfg)
    return cfg


def _split_overrides(folder: Path, overrides: list[str]) -> tuple[tuple[str, ...], list[Any]]:
    """(the overrides Hydra composes: group choices, as written; the parsed value overrides to set after), split
    as Hydra splits them (hydra._internal.defaults_list.Overrides: a value override is one whose key is no config
    group, or whose value is a mapping). An override of Hydra's own settings, a package or a sweep goes wholly to
    Hydra's composition, with all the others."""
    if not overrides:
        return (), []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    if any(o.is_hydra_override() or o.is_sweep_override() or o.package is not None for o in parsed):
        return tuple(overrides), []
    groups: list[str] = []
    values: list[Any] = []
    for line, override in zip(overrides, parsed, strict=True):
        if isinstance(override.value(), dict) or not _is_group(folder, override.key_or_group):
            values.append(override)
        else:
            groups.append(line)
    return tuple(groups), values


def _is_group(folder: Path, name: str) -> bool:
    """Whether `name` is a config group of the conf/ folder (Hydra's search path holds that folder and Hydra's own
    groups, all named hydra/...)."""
    return (folder / name).is_dir()


def _composed(folder: Path, groups: tuple[str, ...]) -> DictConfig:
    """A copy of Hydra's composition of conf/config.yaml with the group overrides `groups`, composed once per
    process for each state of the folder's files."""
    key = (str(folder), groups, _conf_stamp(folder))
    if key not in _COMPOSED:
        cfg = hydra_composition(groups, folder)
        if len(_COMPOSED) >= _COMPOSED_MAX:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[key] = cfg
    return copy.deepcopy(_COMPOSED[key])


def hydra_composition(overrides: Iterable[str], folder: Path | None = None) -> DictConfig:
    """Hydra's own composition of `folder`/config.yaml (default: conf_dir()) with all of `overrides` at once, uncached;
    Hydra's exceptions pass through. compose() gives the same document (tests/unit/test_config_compose.py)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder or conf_dir()), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def pool_from_recording(cfg: DictConfig) -> DictConfig:
    """`pool=replay`: replace the pool section by the pool the recording `pool.from_recording` was made
    from (the resolved section `trinity record` keeps in the recording's manifest, as `pool_config`),
    replayed from that recording. Any recording of any pool trains and evaluates this way with no pool
    call; without `pool.replay` the same section is the live pool again. A pool already expanded (a
    params.yaml) is left as it is."""
    pool = cfg.get("pool")
    if pool is None or not pool.get("from_recording") or pool.get("models"):
        return cfg
    from trinity.record.store import RecordingError, read_manifest

    source = str(pool.from_recording)
    try:
        manifest = read_manifest(Path(source))
    except RecordingError as e:
        raise ConfigError(f"pool=replay: {e}; name the recording with record.name=<folder under "
                          f"{cfg.record.dir}> (or pool.from_recording=<folder>)") from None
    recorded = manifest.get("pool_config")
    if not isinstance(recorded, dict) or not recorded.get("models"):
        raise ConfigError(f"pool=replay: the manifest of {source} does not keep the pool it was made from "
                          f"(pool_config; recordings made before it was kept): rerun `trinity record` with that "
                          f"pool and this record.name once (nothing is recorded again; the manifest gains it), or "
                          f"replay with that pool's own config and pool.replay.recording={source}")
    replay = OmegaConf.to_container(pool.replay, resolve=True) if pool.get("replay") is not None else None
    expanded = OmegaConf.create({**recorded, "from_recording": source,
                                 "replay": replay or {"recording": source, "on_miss": "error"}})
    struct = OmegaConf.is_struct(cfg)
    OmegaConf.set_struct(cfg, False)
    cfg.pool = expanded
    OmegaConf.set_struct(cfg, struct)
    return cfg


def live_pool(cfg: TrinityConfig) -> TrinityConfig:
    """`cfg` with its pool live. A replayed pool (`pool.replay`: pool=recorded_agents, pool=recorded, pool=replay)
    answers only the items its recording holds; without `replay` and `from_recording` the same section is the
    live pool the recording was made from (the same models, setups and order: what `trinity record` keeps in
    the recording's manifest as `pool_config`). A live pool's config is returned as it is."""
    if cfg.pool.replay is None:
        return cfg
    return with_values(cfg, {}, drop=("pool.replay", "pool.from_recording"), resolved=True)


# Hydra's composition takes about 0.1 s; a process that composes the same overrides again (a flow's tasks,
# the test suite) gets a copy of the first result. The key holds every config file's size and change time,
# so an edited conf/ composes anew; interpolations stay unresolved in the copy, as Hydra returns them.
_COMPOSED: dict[tuple, DictConfig] = {}
_COMPOSED_MAX = 64


def _conf_stamp(folder: Path) -> tuple:
    return tuple(sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns, p.stat().st_size)
                        for p in folder.rglob("*") if p.is_file()))


def load(params: str | os.PathLike | None = None, overrides: Iterable[str] = ()) -> TrinityConfig:
    """The config of a run, typed, checked and frozen: `params` (a composed params.yaml, as DVC stages use) or
    conf/ + overrides. Its `document` is the composed mapping it was typed from."""
    overrides = list(overrides)
    if params is not None and not overrides:
        path = Path(params)
        if not path.exists():
            raise ConfigError(f"params file {path} does not exist; run `make params` or pass overrides")
        try:
            cfg = cast(DictConfig, OmegaConf.load(path))   # a params file is a mapping
        except Exception as e:  # yaml errors come in several types
            raise ConfigError(f"params file {path} is not valid YAML: {_first_line(e)}") from None
        OmegaConf.set_struct(cfg, True)   # as Hydra's composition: a key the config lacks is an error, not a new key
        return validate(cfg)
    return validate(compose(overrides, validate_cfg=False))


def to_yaml(cfg: TrinityConfig | DictConfig) -> str:
    return OmegaConf.to_yaml(_document(cfg), resolve=True)


def from_yaml(text: str) -> TrinityConfig:
    """A config written by `to_yaml` (as a task receives it), typed again."""
    return conform(cast(DictConfig, OmegaConf.create(text)))   # to_yaml writes a mapping


def as_written(cfg: TrinityConfig) -> dict[str, Any]:
    """The composed document `cfg` was typed from as plain data, interpolations resolved: the keys and values as
    the config wrote them (ints stay ints, absent keys stay absent), for what must digest or record the config
    exactly as written (a run's key, a recording's manifest, a registered version's hash)."""
    return cast("dict[str, Any]", OmegaConf.to_container(_document(cfg), resolve=True))   # a mapping gives a dict


def read_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML mapping of config keys (a variant's overrides) as plain data, read as the config is read."""
    return cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.load(Path(path)), resolve=True) or {})


def mapping_yaml(mapping: Mapping[str, Any]) -> str:
    """A mapping of config keys as YAML, written as the config is written (read back by `read_mapping`)."""
    return OmegaConf.to_yaml(OmegaConf.create(dict(mapping)))


def with_values(cfg: TrinityConfig, values: Mapping[str, Any], *, drop: Iterable[str] = (),
                resolved: bool = False) -> TrinityConfig:
    """`cfg` with dotted keys ({"paths.states": ..., "eval.sets": [...]}) set in a copy of its document (a key the
    document leaves to the schema's default is added) and the dotted keys `drop` removed, typed again: how code
    derives a run's config from another. `resolved`: the copy's interpolations are resolved first, so a
    value set here does not reach the keys that interpolate it. `apply_overrides` is the strict form, for
    user-written overrides."""
    if resolved:
        out = cast(DictConfig, OmegaConf.create(OmegaConf.to_container(_document(cfg), resolve=True)))
    else:
        out = copy.deepcopy(_document(cfg))
    OmegaConf.set_readonly(out, False)
    OmegaConf.set_struct(out, False)
    for key, value in values.items():
        OmegaConf.update(out, str(key), value, merge=False, force_add=True)
    for key in drop:
        parent, _, leaf = str(key).rpartition(".")
        node = OmegaConf.select(out, parent) if parent else out
        if isinstance(node, DictConfig) and leaf in node:
            del node[leaf]
    return conform(out)


def _document(cfg: TrinityConfig | DictConfig) -> DictConfig:
    """The composed document behind `cfg` (a typed config's `composed`); only this module reads it."""
    if isinstance(cfg, TrinityConfig):
        if cfg.composed is None:
            raise ConfigError("this typed config was built without a composed document (trinity.config.load and "
                              "with_values keep one)")
        return cast(DictConfig, cfg.composed)
    return cfg


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


def validate(cfg: DictConfig) -> TrinityConfig:
    """Static checks that need no network and start nothing: the typed schema (trinity.config_schema:
    unknown keys, types, choices, ranges, rules between keys), then every selected ablation variant.
    Returns the typed config. Raises ConfigError naming the key."""
    checked = conform(cfg)
    known = check_registry_names(checked)
    _validate_ablations(cfg, known)
    return checked


def check_registry_names(typed: TrinityConfig, known: list[str] | None = None) -> list[str]:
    """The open choices the schema cannot know: strategy and suite names against their registries, and
    the rule that an on-policy strategy (it learns from the head's recorded routing decisions, and SVF
    parameters make none) runs without SVF. `known`: the suite names, when the caller has just listed them
    (the ablation variants of one config); returns them."""
    from trinity.evolve.strategy_registry import STRATEGIES
    from trinity.tasks.registry import SUITES, suite_class, suite_names

    strategy = typed.evolve.strategy
    if strategy not in STRATEGIES:
        raise ConfigError(f"config key 'evolve.strategy': unknown strategy {strategy!r}; known: {sorted(STRATEGIES)}")
    if STRATEGIES[strategy].kind == "on_policy" and typed.coordinator.svf.enabled:
        raise ConfigError(f"config key 'coordinator.svf.enabled' must be false with evolve.strategy="
                          f"{strategy} (policy gradient trains the routing head only)")
    if known is None:
        known = suite_names()   # lists the installed plugins too: a plugin that clashes is refused here
    for part in ("train", "transfer"):
        for name in getattr(typed.tasks, part):
            if name not in known:
                raise ConfigError(f"config key 'tasks.{part}': unknown task suite {name!r}; known: {', '.join(known)}")
            if name not in SUITES:
                suite_class(name)   # a plugin suite: import and check it now, before any work starts
    return known


@overload
def apply_overrides(cfg: TrinityConfig, overrides: Any, *, where: str) -> TrinityConfig: ...
@overload
def apply_overrides(cfg: DictConfig, overrides: Any, *, where: str) -> DictConfig: ...
def apply_overrides(cfg: TrinityConfig | DictConfig, overrides: Any, *, where: str) -> TrinityConfig | DictConfig:
    """A copy of `cfg` with dotted overrides ({"evolve.strategy": "reinforce", ...}) applied, of the kind it was
    given (a typed config is typed again from its changed document). Every key must already exist in `cfg`, so
    a typo is a ConfigError naming `<where>.<key>`, never a silent no-op."""
    if isinstance(cfg, TrinityConfig):
        return conform(apply_overrides(_document(cfg), overrides, where=where))
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


def ablation_variants(cfg: TrinityConfig | DictConfig) -> dict[str, Any]:
    """The selected ablation variants (`ablations.variants`, in that order) as full configs: the
    composed config with the variant's overrides applied and the `ablations` section removed; typed
    configs when `cfg` is typed."""
    if isinstance(cfg, TrinityConfig):
        return {name: conform(variant) for name, variant in ablation_variants(_document(cfg)).items()}
    out: dict[str, DictConfig] = {}
    for name, overrides in _variant_overrides(cfg).items():
        variant = apply_overrides(cfg, overrides, where=f"ablations.definitions.{name}")
        del variant["ablations"]
        out[name] = variant
    return out


def _variant_overrides(cfg: DictConfig) -> dict[str, DictConfig | None]:
    """The selected ablation variants' names (in `ablations.variants` order) and dotted overrides; {} when
    ablations are off. ConfigError for an unknown, repeated or malformed variant."""
    ab = _get(cfg, "ablations")
    if ab is None or not ab.get("enabled", False):
        return {}
    definitions = _require(cfg, "ablations.definitions")
    if not isinstance(definitions, DictConfig):
        raise ConfigError("config key 'ablations.definitions' must map variant names to dotted overrides")
    names = ab.get("variants")
    names = list(definitions) if names is None else [str(n) for n in names]
    out: dict[str, DictConfig | None] = {}
    for name in names:
        if name not in definitions:
            raise ConfigError(f"config key 'ablations.variants': unknown variant {name!r}; "
                              f"defined: {list(definitions)}")
        if name in out:
            raise ConfigError(f"config key 'ablations.variants': {name!r} is listed twice")
        overrides = definitions[name]
        if overrides is not None and not isinstance(overrides, DictConfig):
            raise ConfigError(f"config key 'ablations.definitions.{name}' must map dotted keys to values")
        out[name] = overrides
    return out


_INTERPOLATION = re.compile(r"\$\{([^}]*)\}")


def _interpolated_keys(node: Any, found: set[str]) -> bool:
    """Add to `found` every key the interpolations in the unresolved plain mapping `node` read; False when one
    cannot be read that way (a resolver such as ${oc.env:...}, or a key relative to its node)."""
    if isinstance(node, dict):
        return all(_interpolated_keys(v, found) for v in node.values())
    if isinstance(node, list):
        return all(_interpolated_keys(v, found) for v in node)
    if isinstance(node, str) and "${" in node:
        for key in _INTERPOLATION.findall(node):
            if not key or ":" in key or key.startswith(".") or "$" in key:
                return False
            found.add(key)
    return True


def _touches(key: str, read: set[str]) -> bool:
    """Whether overriding `key` changes an interpolation that reads one of `read` (the key, a key under it or
    the section holding it)."""
    return any(r == key or r.startswith(key + ".") or key.startswith(r + ".") for r in read)


def resolved_variants(cfg: DictConfig) -> dict[str, dict[str, Any] | None]:
    """The selected variants as plain, resolved mappings made by setting the overrides in one resolved copy of
    the composed config: what `ablation_variants` gives, resolved, without re-copying and re-resolving the whole
    OmegaConf tree per variant (most of a config's load time). None for a variant this cannot stand for: one
    whose overrides are read by an interpolation elsewhere (resolved before the override would be applied), or
    hold interpolations themselves; `ablation_variants` makes that one. Errors as `apply_overrides` words them."""
    chosen = _variant_overrides(cfg)
    if not chosen:
        return {}
    read: set[str] = set()
    readable = _interpolated_keys(OmegaConf.to_container(cfg, resolve=False), read)
    base = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))   # a DictConfig gives a dict
    readable = readable and "${" not in repr(base)   # an escaped, literal ${...}: typed through OmegaConf again
    out: dict[str, dict[str, Any] | None] = {}
    for name, overrides in chosen.items():
        where = f"ablations.definitions.{name}"
        plain = OmegaConf.to_container(overrides, resolve=False) if overrides is not None else {}
        assert isinstance(plain, dict)
        if not readable or any(_touches(str(k), read) or "${" in repr(v) for k, v in plain.items()):
            out[name] = None
            continue
        variant: dict[str, Any] = copy.deepcopy(base)
        for key, value in plain.items():
            key = str(key)
            parent, _, leaf = key.rpartition(".")
            node: Any = variant
            for part in parent.split(".") if parent else ():
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict) or leaf not in node:
                raise ConfigError(f"config key '{where}.{key}': no key '{key}' in the composed config to override")
            node[leaf] = copy.deepcopy(value)
        del variant["ablations"]
        out[name] = variant
    return out


def _validate_ablations(cfg: DictConfig, known: list[str] | None = None) -> None:
    fast = resolved_variants(cfg)
    slow = ablation_variants(cfg) if any(v is None for v in fast.values()) else {}
    for name in fast:
        variant = fast[name] if fast[name] is not None else slow[name]
        try:
            check_registry_names(conform(variant), known)   # a variant has no ablations of its own
        except ConfigError as e:
            raise ConfigError(f"ablation variant {name!r} (ablations.definitions.{name}): {e}; fix the definition, "
                              "leave the variant out of ablations.variants, or set ablations.enabled=false") from None


def group_choice(overrides: Iterable[str], group: str) -> str | None:
    """The option a command line's overrides choose for a config group (`pool=mine`, `+pool=mine`), or None."""
    choice = None
    for override in overrides:
        key, sep, value = str(override).lstrip("+~").partition("=")
        if sep and key == group:
            choice = value
    return choice


def _option_file(group: str, option: str) -> Path:
    return conf_dir() / group / f"{option}.yaml"


def _pool_option(option: str) -> dict[str, Any] | None:
    """`conf/pool/<option>.yaml` with the pool options its defaults list names merged under it (top-level keys),
    unresolved; None when there is no such file. Read from the files, not composed: cheap enough for a hint."""
    path = _option_file("pool", option)
    if not path.is_file():
        return None
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(data, dict):
        return None
    merged: dict[str, Any] = {}
    for parent in data.get("defaults") or []:
        if isinstance(parent, str) and parent != "_self_":
            merged.update(_pool_option(parent) or {})
    merged.update({str(k): v for k, v in data.items() if k != "defaults"})
    return merged


def pool_option_models(option: str) -> list[str] | None:
    """The model names, in head order, that `conf/pool/<option>.yaml` composes; None for a file that takes them
    from elsewhere (a profile, a recording's manifest) or does not exist."""
    data = _pool_option(option)
    if data is None or data.get("from_recording") or not isinstance(data.get("models"), dict) or not data["models"]:
        return None
    return [str(m) for m in data["models"]]


def pools_with_models(models: Iterable[str]) -> list[str]:
    """The pool options of conf/pool whose models are `models` in this order, live pools before replayed ones."""
    wanted = list(models)
    found = [p.stem for p in sorted(conf_dir().glob("pool/*.yaml")) if pool_option_models(p.stem) == wanted]
    return sorted(found, key=lambda option: (_pool_option(option) or {}).get("replay") is not None)


def experiments_choosing(pool: str) -> list[str]:
    """The experiment options of conf/experiment whose own defaults list chooses `pool=<pool>`."""
    out = []
    for path in sorted(conf_dir().glob("experiment/*.yaml")):
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        defaults = data.get("defaults") or [] if isinstance(data, dict) else []
        if any(isinstance(d, dict) and d.get("override /pool") == pool for d in defaults):
            out.append(path.stem)
    return out


def check_pool_choice(cfg: TrinityConfig, overrides: Iterable[str], *, records: bool = False) -> None:
    """Refuse a command line that chooses a pool (`pool=mine`) other than its experiment's when that experiment
    is made for a recording of its own pool (it names it: `record.name`, as the embedded default does). The
    command would otherwise record the chosen pool into that recording (`records`), or replay it and train,
    plan or evaluate with the other pool's K, roles, caps and items, without a word. A pool with the
    experiment's models (its live pool, or `pool=replay` of its recording) is the same pool; a command line
    that names the recording itself (`record.name=`) has chosen. The ConfigError says what to type instead.
    `trinity config` shows any combination without this check."""
    overrides = [str(o) for o in overrides]
    chosen = group_choice(overrides, "pool")
    named = {"record.name", "pool.replay.recording", "pool.from_recording"}
    if chosen is None or any(o.lstrip("+~").partition("=")[0] in named for o in overrides):
        return
    try:
        base = compose([o for o in overrides if o.lstrip("+~").partition("=")[0] != "pool"], validate_cfg=False)
    except ConfigError:
        return                                   # the experiment's own pool does not compose here: nothing to compare
    record = OmegaConf.to_container(base.record, resolve=False)
    pinned = record.get("name") if isinstance(record, dict) else None
    if not isinstance(pinned, str) or "${" in pinned:
        return                                   # the experiment names its recording after whatever pool it gets
    own, models = str(base.pool.name), [str(m) for m in base.pool.models]
    if [str(m) for m in cfg.pool.models] == models:
        return
    experiment = group_choice(overrides, "experiment") or _default_experiment()
    doing = (f"record pool={chosen} into {base.record.dir}/{pinned}, the recording of another pool" if records
             else f"run pool={chosen} with settings made for another pool's recording")
    theirs = experiments_choosing(chosen)
    instead = (f"pass the experiment made for it: {' or '.join(f'experiment={e}' for e in theirs)}" if theirs else
               f"write conf/experiment/<name>.yaml choosing it (`defaults: [{{override /pool: {chosen}}}]`, "
               f"docs/OWN_POOL.md) and pass experiment=<name> instead of pool={chosen}")
    raise ConfigError(
        f"pool={chosen} is not the pool of experiment={experiment} (pool={own}: [{', '.join(models)}]), which is "
        f"made for that pool's recording (record.name={pinned}) and sets K, roles, caps and items for it: this "
        f"command would {doing}. To use pool={chosen}, {instead}; or keep experiment={experiment} and name the "
        f"recording yourself with record.name=<folder>")


def _default_experiment() -> str:
    data = OmegaConf.to_container(OmegaConf.load(conf_dir() / "config.yaml"), resolve=False)
    for entry in data.get("defaults") or [] if isinstance(data, dict) else []:
        if isinstance(entry, dict) and "experiment" in entry:
            return str(entry["experiment"])
    return "(none)"


def check_api_keys(cfg: TrinityConfig) -> None:
    """Every pool model that names an API-key variable must find it set (checked before pool work). A pool
    replayed from a recording that never asks the live pool (`pool.replay.on_miss: error`) needs none."""
    pool = cfg.pool
    if pool.replay is not None and str(pool.replay.on_miss) == "error":
        return
    for name, model in pool.models.items():
        env = model.api_key_env
        if env and not os.environ.get(env):
            raise ConfigError(
                f"config key 'pool.models.{name}.api_key_env' names ${env}, which is not set; "
                f"export it (keys are read from the environment only)"
            )
