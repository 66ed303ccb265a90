"""The typed shape of the configuration: one dataclass schema per config group (pool, coordinator,
protocol, tasks, evolve, eval, serve, ablations, paths) under one root, enums for the closed choices
(choices.py) and range checks declared on the fields (fields.py), applied in one place.

`conform(cfg)` checks a composed config (from Hydra or a params.yaml) against the schema: an unknown
key (a typo), a value of the wrong type, a choice outside its enum or a number out of range is one
ConfigError naming the full key. It returns the typed, frozen config, whose absent optional keys hold the
schema's defaults; those defaults are the only ones (code reads the typed config's attributes, never
`.get(key, default)`). The typed config keeps the document it was typed from (`composed`, read only by
trinity.config); a section records the keys its config wrote (`written`, on the pool's sections); `typed`
types a document and returns a typed config unchanged.

Why checked after composition rather than with the schema in Hydra's defaults list: `dvc exp run -S` composes
conf/ with its own Hydra, which does not run this package, and a params.yaml is read without Hydra.
The composed config itself is left as written (params.yaml and DVC's parameter hashes do not change)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_type_hints

from trinity.config_schema.fields import check_tree, is_key
from trinity.config_schema.root import TrinityConfig
from trinity.errors import ConfigError

T = TypeVar("T")
E = TypeVar("E", bound=Enum)

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["TrinityConfig", "choice", "conform", "section", "typed"]


def conform(cfg: Any) -> TrinityConfig:
    """`cfg` (the whole composed config) as a checked TrinityConfig; ConfigError names the key."""
    typed = _typed(cfg, TrinityConfig, "")
    check_tree(typed)
    if typed.composed is None and not isinstance(cfg, TrinityConfig):
        typed = dataclasses.replace(typed, composed=cfg)
    return typed


def typed(cfg: TrinityConfig | DictConfig) -> TrinityConfig:
    """The config as its typed, checked, frozen schema object (defaults filled from the schema); a typed config
    is returned as it is. Called at the edges only (trinity.config's `load`, the flows and the command line):
    everything below them is handed the typed config or its sections (tests/unit/test_architecture.py)."""
    if isinstance(cfg, TrinityConfig):
        return cfg
    return conform(cfg)


def section(node: Any, schema: type[T], key: str) -> T:
    """One config section (e.g. cfg.pool.retry, possibly absent) as its checked schema dataclass, the
    schema's defaults filling what the section leaves out."""
    if node is None:
        node = {}
    typed = _typed(node, schema, key)
    check_tree(typed, key)
    return typed


def choice(enum: type[E], value: Any, key: str) -> E:
    """One closed choice read on its own (e.g. from a partial config): the enum member, or a ConfigError
    naming the key and the allowed values."""
    try:
        return enum(value)
    except ValueError:
        raise ConfigError(f"config key '{key}' must be one of "
                          f"{'|'.join(m.value for m in enum)}, got {value!r}") from None


def _typed(node: Any, schema: type[T], key: str) -> T:
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(node, schema):
        return node
    if not isinstance(node, (DictConfig, Mapping)):
        raise ConfigError(f"config key '{key or '<root>'}' must be a mapping, got {node!r}")
    try:
        # a sub-node's interpolations (${paths.cache}/pool) resolve against its own root
        if isinstance(node, DictConfig):
            node = OmegaConf.to_container(node, resolve=True)
        else:
            node = _plain(node)
            if _has_interpolation(node):
                node = OmegaConf.to_container(OmegaConf.create(node), resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(_message(e, key)) from None
    return _build(node, schema, key)


# The typed config is built from the plain composed mapping by walking the schema's type hints (the
# conversions OmegaConf's structured configs apply, 19 to 65 times faster: benchmarks/config_load.py): a
# dataclass from a mapping (absent keys at the field's default), Optional, List, Dict, Enum (by name or value),
# and the scalars int, float, bool and str with OmegaConf's rules (an int is a float; "3" is an int; "yes" is
# true).
_MANDATORY = "???"
_TRUE = {"y", "yes", "on", "true", "1"}
_FALSE = {"n", "no", "off", "false", "0"}


def _build(value: Any, hint: Any, key: str, given: Any = None) -> Any:
    """`given`: what the config itself wrote at this key (None: all of `value`), before the schema's defaults
    were merged in; a dataclass's `written` keys come from it."""
    import types
    import typing

    where = key or "<root>"
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _build(value, args[0], key, given)
        raise ConfigError(f"config key '{where}': the schema's union {hint} is not supported")
    if value is None:
        raise ConfigError(f"config key '{where}' must not be null (it is not optional)")
    if isinstance(value, str) and value == _MANDATORY:
        raise ConfigError(f"config key '{where}' is mandatory and has no value (???)")
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build_dataclass(value, hint, key, value if given is None else given)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{where}' must be a list, got {value!r}")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return [_build(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key '{where}' must be a mapping, got {value!r}")
        key_type, item = typing.get_args(hint) or (Any, Any)
        out = {}
        for k, v in value.items():
            if key_type is str and not isinstance(k, str):
                raise ConfigError(f"config key '{where}': key {k!r} must be a string")
            out[k] = _build(v, item, f"{key}.{k}", given.get(k, {}) if isinstance(given, Mapping) else None)
        return out
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint, value, where)
    if hint is bool:
        return _bool(value, where)
    if hint is int:
        if type(value) is int:
            return value
        if type(value) is str:
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"config key '{where}': Value '{value}' of type '{type(value).__name__}' could not be "
                          f"converted to Integer")
    if hint is float:
        if type(value) in (float, int):
            return float(value)
        if type(value) is str:
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"config key '{where}': Value '{value}' of type '{type(value).__name__}' could not be "
                          f"converted to Float")
    if hint is str:
        if isinstance(value, (Mapping, list, tuple)):
            raise ConfigError(f"config key '{where}' must be a string, got {value!r}")
        return value.value if isinstance(value, Enum) else str(value)
    raise ConfigError(f"config key '{where}': the schema's type {hint} is not supported")


def _build_dataclass(value: Any, schema: type, key: str, given: Any) -> Any:
    if isinstance(value, schema):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"config key '{key or '<root>'}' must be a mapping, got {value!r}")
    fields = {f.name: f for f in dataclasses.fields(schema) if is_key(f)}
    unknown = [k for k in value if k not in fields]
    if unknown:
        leaf = str(unknown[0])
        close = difflib.get_close_matches(leaf, list(fields), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        full = f"{key}.{leaf}" if key else leaf
        raise ConfigError(f"config key '{full}' is not a known key{hint}; known here: {', '.join(fields)}")
    hints = _hints(schema)
    kwargs = {}
    for name, f in fields.items():
        sub = f"{key}.{name}" if key else name
        if name in value:
            # a mapping over a default object or mapping: keys it leaves out keep the default's values
            written = given.get(name, {}) if isinstance(given, Mapping) else {}
            kwargs[name] = _build(_merged(_default(f), value[name]), hints[name], sub, written)
        else:
            default = _default(f)
            if isinstance(default, str) and default == _MANDATORY:
                raise ConfigError(f"config key '{sub}' is mandatory and has no value (???)")
    if "written" in _hints(schema):
        kwargs["written"] = tuple(str(k) for k in given) if isinstance(given, Mapping) else ()
    return schema(**kwargs)


def omegaconf_reference(container: Mapping) -> TrinityConfig:
    """The typed config as OmegaConf's structured configs build it (the schema merged with the plain config,
    then built as objects), unchecked: the reference that the schema walk of `conform` is tested and
    benchmarked against (tests/unit/test_config_schema.py, benchmarks/config_load.py), about 60x slower."""
    from unittest import mock

    from omegaconf import OmegaConf

    # OmegaConf makes a frozen dataclass's node read-only, and then cannot merge a mapping onto a value of a Dict
    # field (pool.models.<name>); for the reference every node stays writable. The built objects are frozen.
    with mock.patch("omegaconf.dictconfig.is_structured_config_frozen", return_value=False):
        return cast(TrinityConfig, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrinityConfig),
                                                                        dict(container))))


def _merged(default: Any, given: Any) -> Any:
    """`given` merged onto a field's default as OmegaConf merges a config onto its schema: mappings key by
    key, recursively (a dataclass default as the mapping of its fields); anything else replaces."""
    if not isinstance(given, Mapping):
        return given
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        default = {g.name: getattr(default, g.name) for g in dataclasses.fields(default) if is_key(g)}
    if not isinstance(default, Mapping):
        return given
    return {**default, **{k: _merged(default.get(k), v) for k, v in given.items()}}


def _default(f: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _MANDATORY


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(schema: type) -> dict[str, Any]:
    if schema not in _HINTS:
        _HINTS[schema] = get_type_hints(schema)
    return _HINTS[schema]


def _enum(enum: type[E], value: Any, where: str) -> E:
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        name = value[len(enum.__name__) + 1:] if value.startswith(f"{enum.__name__}.") else value
        if name in enum.__members__:
            return enum[name]
    if not isinstance(value, (bool, float)):
        try:
            return enum(value)
        except ValueError:
            pass
    raise ConfigError(f"config key '{where}' must be one of {'|'.join(m.name for m in enum)}, got '{value}'")


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if type(value) is int:
        return value != 0
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ConfigError(f"config key '{where}': Value '{value}' is not a valid bool")


def _has_interpolation(node: Any) -> bool:
    if isinstance(node, str):
        return "${" in node
    if isinstance(node, Mapping):
        return any(_has_interpolation(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_interpolation(v) for v in node)
    return False


def _plain(value: Any) -> Any:
    """Mappings (e.g. a frozen ProtocolConfig's MappingProxy caps) and tuples as dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _message(e: Any, prefix: str) -> str:
    """An OmegaConf error while resolving the config's interpolations, naming the full key."""
    full = str(getattr(e, "full_key", "") or "")
    full = f"{prefix}.{full}" if prefix and full else (full or prefix or "<root>")
    text = (getattr(e, "msg", None) or str(e)).strip().splitlines()[0]
    return f"config key '{full}': {text}"
