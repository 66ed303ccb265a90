"""The typed shape of the configuration: one dataclass schema per config group (pool, coordinator,
protocol, tasks, evolve, eval, serve, ablations, paths) under one root, enums for the closed choices
(choices.py) and range checks declared on the fields (fields.py), applied in one place.

`conform(cfg)` checks a composed config (from Hydra or a params.yaml) against the schema: an unknown
key (a typo), a value of the wrong type, a choice outside its enum or a number out of range is one
ConfigError naming the full key. It returns the typed config, whose absent optional keys hold the
schema's defaults; those defaults are the only ones (readers use `section`, never `.get(key, default)`).

Why a merge after composition rather than the schema in Hydra's defaults list: `dvc exp run -S` composes
conf/ with its own Hydra, which does not run this package, and a params.yaml is read without Hydra.
The composed config itself is left as written (params.yaml and DVC's parameter hashes do not change)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import re
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar, get_type_hints

from trinity.config_schema.fields import check_tree
from trinity.config_schema.root import TrinityConfig
from trinity.errors import ConfigError

T = TypeVar("T")
E = TypeVar("E", bound=Enum)

__all__ = ["TrinityConfig", "choice", "conform", "group", "section", "setting"]


def conform(cfg: Any) -> TrinityConfig:
    """`cfg` (the whole composed config) as a checked TrinityConfig; ConfigError names the key."""
    typed = _typed(cfg, TrinityConfig, "")
    check_tree(typed)
    return typed


def section(node: Any, schema: type[T], key: str) -> T:
    """One config section (e.g. cfg.pool.retry, possibly absent) as its checked schema dataclass, the
    schema's defaults filling what the section leaves out."""
    if node is None:
        node = {}
    typed = _typed(node, schema, key)
    check_tree(typed, key)
    return typed


def group(cfg: Any, name: str) -> Any:
    """The config group `cfg.<name>` (pool, coordinator, evolve, retrain, ...) as its schema dataclass, the
    schema's defaults filling what the config leaves out (an absent group is all defaults). The way code
    outside the config floor reads an optional key: `group(cfg, "evolve").warm_start`, never
    `OmegaConf.select(cfg, "evolve.warm_start", default=...)`."""
    schema = _GROUPS.get(name)
    if schema is None:
        raise KeyError(f"no config group {name!r}; groups: {', '.join(sorted(_GROUPS))}")
    node = cfg.get(name) if isinstance(cfg, Mapping) or hasattr(cfg, "get") else getattr(cfg, name, None)
    return section(node, schema, name)


def setting(cfg: Any, dotted: str) -> Any:
    """One key, `dotted` ("coordinator.routing"), as written in `cfg` or, when absent, the schema's default;
    an enum key comes back as its member (ConfigError naming the key for a value outside it). For readers
    that see part of a config (tests, a toy problem) and need one key without checking its whole group."""
    schema: Any = TrinityConfig
    node = cfg
    names = dotted.split(".")
    for depth, name in enumerate(names):
        hints = get_type_hints(schema)
        if name not in hints:
            raise KeyError(f"{dotted!r}: the schema has no key {'.'.join(names[:depth + 1])!r}")
        present = node is not None and hasattr(node, "get") and name in node
        node = node.get(name) if present else None
        if depth < len(names) - 1:
            schema = hints[name]
            if not dataclasses.is_dataclass(schema):
                raise KeyError(f"{dotted!r}: {'.'.join(names[:depth + 1])!r} is not a group")
            continue
        default = getattr(schema(), name)
        if not present:
            return default
        if isinstance(default, Enum):
            return choice(type(default), node, dotted)
        return node


def choice(enum: type[E], value: Any, key: str) -> E:
    """One closed choice read on its own (e.g. from a partial config): the enum member, or a ConfigError
    naming the key and the allowed values."""
    try:
        return enum(value)
    except ValueError:
        raise ConfigError(f"config key '{key}' must be one of {'|'.join(m.value for m in enum)}, got {value!r}") from None


def _typed(node: Any, schema: type[T], key: str) -> T:
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(node, schema):
        return node
    if not isinstance(node, (DictConfig, Mapping)):
        raise ConfigError(f"config key '{key or '<root>'}' must be a mapping, got {node!r}")
    try:
        # a sub-node's interpolations (${paths.cache}/pool) resolve against its own root, before the merge
        node = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else _plain(node)
        memo = _memo_key(schema, key, node)
        if memo is not None and memo in _CONFORMED:
            return copy.deepcopy(_CONFORMED[memo])
        merged = OmegaConf.merge(_writable(OmegaConf.structured(schema)), node)
        typed = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigError(_message(e, key)) from None
    if memo is not None:
        if len(_CONFORMED) >= _CONFORMED_MAX:
            _CONFORMED.pop(next(iter(_CONFORMED)))
        _CONFORMED[memo] = copy.deepcopy(typed)
    return typed  # type: ignore[return-value]


def _writable(node: Any) -> Any:
    """The structured defaults with the read-only flags cleared that OmegaConf puts on the nodes of frozen
    dataclasses (ProtocolConfig), so the config can be merged onto them; the object `to_object` builds is
    still frozen."""
    from omegaconf import DictConfig, OmegaConf

    OmegaConf.set_readonly(node, None)
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            _writable(child)
    return node


# The schema merge costs about 0.1 s per config and a run (or a test session) conforms the same configs
# many times (validate, then each part's group): a typed result is kept per (schema, key, plain content)
# and handed out as a copy, so a caller that changes its copy changes nothing else.
_CONFORMED: dict[tuple[Any, str, str], Any] = {}
_CONFORMED_MAX = 256


def _memo_key(schema: type, key: str, node: Any) -> tuple[Any, str, str] | None:
    try:
        return schema, key, json.dumps(node, sort_keys=True)
    except (TypeError, ValueError):   # keys of mixed types, values JSON cannot write: not memoised
        return None


def _plain(value: Any) -> Any:
    """Mappings (e.g. a frozen ProtocolConfig's MappingProxy caps) and tuples as dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _message(e: Any, prefix: str) -> str:
    from omegaconf.errors import ConfigKeyError

    full = str(getattr(e, "full_key", "") or "")
    full = f"{prefix}.{full}" if prefix and full else (full or prefix or "<root>")
    text = (getattr(e, "msg", None) or str(e)).strip().splitlines()[0]
    if isinstance(e, ConfigKeyError):
        leaf = full.rsplit(".", 1)[-1]
        known = [f.name for f in dataclasses.fields(e.object_type)] if dataclasses.is_dataclass(e.object_type) else []
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"config key '{full}' is not a known key{hint}; known here: {', '.join(known)}"
    enum = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", text)
    if enum:
        return f"config key '{full}' must be one of {enum.group(2).replace(', ', '|')}, got '{enum.group(1)}'"
    return f"config key '{full}': {text}"


_GROUPS: dict[str, type] = {f: t for f, t in get_type_hints(TrinityConfig).items()
                            if isinstance(t, type) and dataclasses.is_dataclass(t)}
