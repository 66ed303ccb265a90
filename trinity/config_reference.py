"""docs/CONFIG.md: every option of every config group, rendered from conf/ itself.

The YAML files carry their own documentation (a header comment, a comment per key), so the reference is
those files, grouped and titled, with the keys each option sets. `trinity config --reference` prints it;
tests/test_config_reference.py fails when the committed file is behind conf/.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from trinity.config import conf_dir

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
        for f, name in zip(files, names):
            # A nested folder is a nested group: pool/profile/dominant.yaml is `pool/profile=dominant`.
            sub, _, leaf = name.rpartition("/")
            out += _section(f"{group.name}/{sub}={leaf}" if sub else f"{group.name}={name}", f, root)
    return "\n".join(out).rstrip("\n") + "\n"
