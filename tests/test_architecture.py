"""The import rules docs/ARCHITECTURE.md states: what each package of trinity/ must never import
(function-level imports included), and that the library never imports the flows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> packages of trinity it must never import (kept in step with docs/ARCHITECTURE.md)
NEVER = {
    "tasks": {"pool", "coordinator", "episodes", "routers", "evolve", "eval", "serve", "pipeline"},
    "routers": {"pool", "episodes", "tasks", "evolve", "eval", "serve", "pipeline"},
    "episodes": {"coordinator", "evolve", "eval", "serve", "pipeline"},
    "pool": {"coordinator", "routers", "evolve", "eval", "serve", "pipeline"},
    "coordinator": {"pool", "evolve", "eval", "serve"},
    "evolve": {"pool", "tasks", "eval", "serve", "pipeline"},
    "eval": {"evolve", "serve"},
    "serve": {"evolve"},
    "pipeline": {"serve"},
    "config_schema": {"pool", "episodes", "eval", "serve", "pipeline", "registry"},
    "registry": {"pool", "coordinator", "episodes", "routers", "tasks", "evolve", "serve", "pipeline"},
}


def imported_packages(package: str) -> dict[str, set[str]]:
    """trinity sub-packages (and 'flows') imported anywhere in trinity/<package>, with the files."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "trinity" / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                target = parts[1] if parts[0] == "trinity" and len(parts) > 1 else parts[0]
                if parts[0] in ("trinity", "flows"):
                    found.setdefault(target if parts[0] == "trinity" else "flows", set()).add(
                        str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", sorted(NEVER))
def test_package_never_imports_what_the_architecture_forbids(package):
    found = imported_packages(package)
    broken = {p: sorted(found[p]) for p in NEVER[package] & set(found)}
    assert not broken, f"trinity/{package} imports {broken}; docs/ARCHITECTURE.md forbids it"


def test_the_library_never_imports_the_flows():
    for package in [p.name for p in (ROOT / "trinity").iterdir() if p.is_dir() and p.name != "__pycache__"]:
        assert "flows" not in imported_packages(package), package


def test_the_rules_are_the_documented_ones():
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    for package, never in NEVER.items():
        line = next((l for l in text.splitlines() if l.startswith(f"- `{package}`")), None)
        assert line is not None, f"docs/ARCHITECTURE.md has no rule line for {package}"
        for other in never:
            assert f"`{other}`" in line.split("never imports", 1)[-1], (package, other)
