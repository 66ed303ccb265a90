"""Range checks for schema fields, declared next to the field and applied in one place.

`number(default, ge=0)` declares a field with its bounds; `check_tree` walks a typed config (the
dataclasses OmegaConf builds from the schema) and raises one ConfigError naming the full key of the
first value out of range. Rules that relate several keys are a dataclass's `check(key)` method, called
by the same walk with the dataclass's own key."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from trinity.errors import ConfigError

_BOUNDS = ("gt", "ge", "le")


def number(default: Any = dataclasses.MISSING, *, gt: float | None = None, ge: float | None = None,
           le: float | None = None, default_factory: Any = dataclasses.MISSING) -> Any:
    """A numeric field (or a list of numbers) with bounds; None always passes (an unset optional)."""
    metadata = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def written_keys() -> Any:
    """A section's `written` field: the keys its config wrote, in the order written (the schema walk fills it
    and a config cannot set it), so a reader can tell a written value from the schema's default without the
    composed document. Not a config key, not compared."""
    return dataclasses.field(default=(), compare=False, repr=False, metadata={NOT_A_KEY: True})


def composed_document() -> Any:
    """The root's `composed` field: the document the config was typed from (not a config key, not compared)."""
    return dataclasses.field(default=None, compare=False, repr=False, metadata={NOT_A_KEY: True})


NOT_A_KEY = "not_a_key"   # metadata of the fields the schema walk fills itself


def is_key(f: dataclasses.Field) -> bool:
    """Whether a schema field is a config key (not a `written` or `composed` field)."""
    return f.init and not f.metadata.get(NOT_A_KEY)


def _describe(bounds: dict) -> str:
    parts = [f"> {bounds['gt']}" if "gt" in bounds else "", f">= {bounds['ge']}" if "ge" in bounds else "",
             f"<= {bounds['le']}" if "le" in bounds else ""]
    return " and ".join(p for p in parts if p)


def check_number(value: Any, key: str, bounds: dict) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"config key '{key}' must be a finite number {_describe(bounds)}, got {value!r}")
    if ("gt" in bounds and not value > bounds["gt"]) or ("ge" in bounds and not value >= bounds["ge"]) \
            or ("le" in bounds and not value <= bounds["le"]):
        raise ConfigError(f"config key '{key}' must be {_describe(bounds)}, got {value!r}")


def check_tree(node: Any, key: str = "") -> None:
    """Apply every field's bounds and every dataclass's `check(key)` below `node`."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            sub = f"{key}.{f.name}" if key else f.name
            bounds = {k: f.metadata[k] for k in _BOUNDS if k in f.metadata}
            if bounds:
                for i, v in enumerate(value) if isinstance(value, list) else [(None, value)]:
                    check_number(v, sub if i is None else f"{sub}[{i}]", bounds)
            check_tree(value, sub)
        own = getattr(node, "check", None)
        if callable(own):
            own(key)
    elif isinstance(node, dict):
        for name, value in node.items():
            check_tree(value, f"{key}.{name}")
