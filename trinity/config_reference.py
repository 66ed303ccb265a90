"""docs/CONFIG.md: every option of every config group, rendered from conf/ itself.

The YAML files carry their own documentation (a header comment, a comment per key), so the reference is
those files, grouped and titled, with the keys each option sets. `trinity config --reference` prints it;
tests/unit/test_config_reference.py fails when the committed file is behind conf/.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from trinity.config import conf_dir
from trinity.config_schema.fields import is_key

_INTRO = """# Configuration reference

Generated from `conf/` by `trinity config --reference > docs/CONFIG.md`; do not edit by hand.
`conf/config.yaml` is the root: a defaults list choosing one option per group, then the keys every run
has. Choose an option with `group=option` (e.g. `evolve=reinforce`), set a key with `key=value` (e.g.
`evolve.sigma0=0.05`); `trinity config [overrides]` prints the composed result. An `experiment/` file
pins a combination and holds only what differs. Each option below is its file, comments included.
"""


def _header(text: str) -> str:
    """The file's leading comment block, as prose."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(x for x in lines if x)


def _keys(text: str) -> list[str]:
    data = yaml.safe_load(text) or {}
    return [k for k in data if k != "defaults"] if isinstance(data, dict) else []


def _section(title: str, path: Path, root: Path) -> list[str]:
    text = path.read_text()
    out = [f"### `{title}`", "", f"File: `conf/{path.relative_to(root)}`."]
    header = _header(text)
    if header:
        out += ["", header]
    keys = _keys(text)
    if keys:
        out += ["", "Sets: " + ", ".join(f"`{k}`" for k in keys) + "."]
    out += ["", "```yaml", text.rstrip("\n"), "```", ""]
    return out


def render(root: Path | None = None) -> str:
    root = Path(root or conf_dir())
    out = [_INTRO, "## The root: `config.yaml`", ""]
    out += _section("config.yaml", root / "config.yaml", root)[2:]
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(group.rglob("*.yaml"))
        if not files:
            continue
        names = [str(f.relative_to(group).with_suffix("")) for f in files]
        out += [f"## Group `{group.name}`", "", "Options: " + ", ".join(f"`{n}`" for n in names) + ".", ""]
        for f, name in zip(files, names, strict=True):
            # A nested folder is a nested group: pool/profile/dominant.yaml is `pool/profile=dominant`.
            sub, _, leaf = name.rpartition("/")
            out += _section(f"{group.name}/{sub}={leaf}" if sub else f"{group.name}={name}", f, root)
    out += schema_table()
    return "\n".join(out).rstrip("\n") + "\n"


_SCHEMA_INTRO = """## Every key, typed (`trinity/config_schema/`)

Each key a config may hold, with its type, the schema's default (what applies when no file sets it) and
its allowed values or range. A key not in this table, a value of another type, a choice outside its list
or a number out of range is refused naming the key (`config key 'evolve.sigmo' is not a known key (did
you mean 'sigma0'?)`), when a config is composed and when a params.yaml is loaded.
"""


def schema_table() -> list[str]:
    from trinity.config_schema import TrinityConfig

    rows = ["| key | type | default | allowed |", "|---|---|---|---|"]
    rows += [f"| `{k}` | {t} | {d} | {a} |" for k, t, d, a in _schema_rows(TrinityConfig, "")]
    return ["", _SCHEMA_INTRO, *rows, ""]


def _unwrap(tp: Any) -> tuple[Any, bool]:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0], True
    return tp, False


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (list, list):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin in (dict, dict):
        return "mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "choice"
    return getattr(tp, "__name__", str(tp)).replace("Any", "any")


def _schema_rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    hints = typing.get_type_hints(cls)
    out = []
    default_obj = cls()
    for f in dataclasses.fields(cls):
        if not is_key(f):
            continue
        key = f"{prefix}{f.name}"
        tp, optional = _unwrap(hints[f.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += _schema_rows(tp, f"{key}.")
            continue
        dict_args = typing.get_args(tp) if typing.get_origin(tp) in (dict, dict) else ()
        if dict_args and isinstance(dict_args[1], type) and dataclasses.is_dataclass(dict_args[1]):
            out += _schema_rows(dict_args[1], f"{key}.<name>.")
            continue
        value = getattr(default_obj, f.name)
        default = "required" if value == "???" else f"`{_show(value)}`"
        allowed = " \\| ".join(m.value for m in tp) if isinstance(tp, type) and issubclass(tp, enum.Enum) else ""
        bounds = [f"{sym} {f.metadata[k]}" for k, sym in (("gt", ">"), ("ge", ">="), ("le", "<=")) if k in f.metadata]
        allowed = allowed or " and ".join(bounds)
        out.append((key, _type_name(tp) + (" or null" if optional else ""), default, allowed))
    return out


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, str) and len(value) > 40:
        return value[:37].replace("\n", " ") + "..."
    return str(value).replace("\n", " ")
