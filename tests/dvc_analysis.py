"""The import analyser behind dvc.yaml's code deps (no tests here): which project modules a flow stage can
import, found statically (ast) from flows/<name>.py, following imports transitively: imports at module level
and inside functions, `from pkg import submodule`, relative imports, and project modules named in strings
(`import_module("trinity.x")` tables, `python -m trinity.x` subprocesses). Used by tests/unit/test_dvc_deps.py
and scripts/dvc_deps.py (which rewrites the deps)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path, PurePosixPath

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trinity", "flows")
_CMD = re.compile(r"^\s*python\s+-m\s+(flows\.[A-Za-z_][\w.]*)(\s|$)")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


# --------------------------------------------------------------------------------------------- analyser


def module_file(root: Path, name: str) -> Path | None:
    """The file that defines module `name` under `root` (a package's `__init__.py`), or None."""
    base = root.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def direct_imports(root: Path, name: str, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """Project modules that module `name` can import (anywhere in its body), parents included."""
    path = module_file(root, name)
    assert path is not None, name
    stat = path.stat()
    return set(_direct_imports(root, name, packages, path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4096)
def _direct_imports(root: Path, name: str, packages: tuple[str, ...], path: Path, mtime_ns: int,
                    size: int) -> frozenset[str]:
    """direct_imports of one version of the file (its modification time and size in the key): every stage's
    tests walk the same modules, and parsing them again each time was most of these tests' time."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(mod: str) -> None:
        if mod.split(".")[0] in packages and module_file(root, mod) is not None:
            found.update(m for m in _with_parents(mod) if module_file(root, m) is not None)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = name.split(".") if is_package else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            add(base)
            for alias in node.names:
                if alias.name != "*":
                    add(f"{base}.{alias.name}")  # `from pkg import submodule`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.match(node.value):
            add(node.value)  # import_module("trinity.x"), [sys.executable, "-m", "trinity.x"]
    found.discard(name)
    return frozenset(found)


def reachable_modules(root: Path, entry: str, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """`entry`, its parent packages and every project module reachable from them by imports."""
    todo = [m for m in _with_parents(entry) if module_file(root, m) is not None]
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        todo.extend(direct_imports(root, mod, packages) - seen)
    return seen


def reachable_files(root: Path, entry: str, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """The reachable modules' files, as posix paths relative to `root`."""
    return {module_file(root, m).relative_to(root).as_posix() for m in reachable_modules(root, entry, packages)}


def _covers(dep: str, path: str) -> bool:
    dep_p, file_p = PurePosixPath(dep.rstrip("/")), PurePosixPath(path)
    return dep_p == file_p or dep_p in file_p.parents


def uncovered(files: set[str], deps: list[str]) -> list[str]:
    return sorted(f for f in files if not any(_covers(d, f) for d in deps))


def minimal_deps(root: Path, files: set[str]) -> list[str]:
    """The shortest deps list that names exactly `files`: a folder of trinity/ or flows/ where every module
    in it is one of them, each other file by itself (flows first, then trinity, sorted)."""
    every = {p.relative_to(root).as_posix() for pkg in PACKAGES for p in (root / pkg).rglob("*.py")
             if "__pycache__" not in p.parts}
    chosen = set()
    for f in files:
        parts = f.split("/")
        folders = ["/".join(parts[:n]) for n in range(2, len(parts))]
        full = [d for d in folders if {x for x in every if x.startswith(d + "/")} <= files]
        chosen.add(full[0] if full else f)
    return sorted(chosen, key=lambda d: (not d.startswith("flows"), d))


# --------------------------------------------------------------------------------------------- dvc.yaml


def _paths(entries) -> list[str]:
    # deps/outs/metrics/plots entries are strings or one-key mappings {path: options}
    out = []
    for e in entries or []:
        out.extend([e] if isinstance(e, str) else list(e))
    return out


def _flow_stages() -> dict[str, tuple[str, dict]]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    found = {}
    for name, stage in stages.items():
        m = _CMD.match(str(stage.get("cmd", "")))
        if m:
            found[name] = (m.group(1), stage)
    return found
