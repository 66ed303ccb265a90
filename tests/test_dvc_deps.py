"""dvc.yaml's stage deps cover the code each stage runs.

For every stage whose cmd is `python -m flows.<name> ...`, the project modules the stage can import are
found by static analysis (ast) from flows/<name>.py, following imports transitively: imports at module
level and inside functions (the project imports lazily a lot), `from pkg import submodule`, relative
imports, and dynamic references to project modules by name (`import_module("trinity.x")` tables,
`python -m trinity.x` subprocesses). Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` too,
so those count. Each module file must be listed in the stage's deps, itself or under a listed folder;
otherwise editing it would not rerun the stage and `dvc repro` would keep stale results.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

import pytest
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
    return found


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


FLOW_STAGES = _flow_stages()


def test_dvc_yaml_has_flow_stages():
    assert {"prepare", "cache_states", "evolve", "ablate", "evaluate"} <= set(FLOW_STAGES)


@pytest.mark.parametrize("stage", sorted(FLOW_STAGES))
def test_stage_deps_cover_imported_code(stage):
    module, spec = FLOW_STAGES[stage]
    assert module_file(ROOT, module) is not None, f"stage {stage}: cmd runs {module}, which has no file"
    missing = uncovered(reachable_files(ROOT, module), _paths(spec.get("deps")))
    assert not missing, f"stage {stage!r}: deps miss code it imports: {missing}"


@pytest.mark.parametrize("stage", sorted(FLOW_STAGES))
def test_stage_does_not_depend_on_its_outputs(stage):
    _, spec = FLOW_STAGES[stage]
    outs = _paths(spec.get("outs")) + _paths(spec.get("metrics")) + _paths(spec.get("plots"))
    clash = [(d, o) for d in _paths(spec.get("deps")) for o in outs if _covers(d, o) or _covers(o, d)]
    assert not clash, f"stage {stage!r} depends on its own outputs: {clash}"


def test_analysis_is_not_trivial():
    # guards against an analyser that finds nothing and so passes vacuously
    evolve = reachable_files(ROOT, "flows.evolve")
    assert {"flows/evolve.py", "flows/_common.py", "trinity/pipeline/evolve_stage.py",
            "trinity/pipeline/rollouts.py", "trinity/evolve/loop.py"} <= evolve
    assert any(f.startswith("trinity/tasks/graders/") for f in evolve), sorted(evolve)
    assert any(f.startswith("trinity/tasks/suites_") for f in evolve), sorted(evolve)
    evaluate = reachable_files(ROOT, "flows.evaluate")
    assert {"trinity/pipeline/evaluate_stage.py", "trinity/pipeline/rollouts.py"} <= evaluate
    assert any(f.startswith("trinity/episodes/") for f in evaluate)
    assert any(f.startswith("trinity/coordinator/") for f in evaluate)
    # nor does it find everything: code a stage cannot reach stays out
    prepare = reachable_files(ROOT, "flows.prepare")
    assert not any(f.startswith("trinity/eval/") for f in prepare), sorted(prepare)
    assert "trinity/pipeline/evaluate_stage.py" not in prepare
    assert not {"flows/deploy.py", "flows/pipeline.py", "trinity/cli.py"} & (evolve | evaluate)
    assert not any(f.startswith("trinity/serve/") for f in evolve | evaluate)


# --------------------------------------------------------------------------------------------- unit


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def test_analyser_on_synthetic_package(tmp_path):
    _write(tmp_path, {
        "app/__init__.py": "",
        "app/main.py": "import os\nfrom app import eager\n\ndef run():\n    from app.lazy import thing\n    return thing\n",
        "app/eager.py": "from .sub import helper\n",  # relative import of a subpackage's module
        "app/lazy.py": "def thing():\n    import app.deep.leaf\n",
        "app/deep/__init__.py": "",
        "app/deep/leaf.py": "from app.sub import other  # submodule via from-import\n",
        "app/sub/__init__.py": "",
        "app/sub/helper.py": "X = 1\n",
        "app/sub/other.py": "from importlib import import_module\nMOD = import_module('app.dynamic')\n",
        "app/dynamic.py": "",
        "app/unused.py": "import app.never\n",
        "app/never.py": "",
    })
    files = reachable_files(tmp_path, "app.main", packages=("app",))
    assert files == {
        "app/__init__.py", "app/main.py", "app/eager.py", "app/lazy.py", "app/deep/__init__.py",
        "app/deep/leaf.py", "app/sub/__init__.py", "app/sub/helper.py", "app/sub/other.py", "app/dynamic.py",
    }
    assert "app/unused.py" not in files and "app/never.py" not in files


def test_coverage_by_file_or_folder():
    files = {"trinity/tasks/graders/math.py", "trinity/config.py", "trinity/configx.py"}
    assert uncovered(files, ["trinity/tasks", "trinity/config.py"]) == ["trinity/configx.py"]
    assert uncovered(files, ["trinity/tasks/", "trinity/config.py", "trinity/configx.py"]) == []
    assert uncovered({"trinity/tasks.py"}, ["trinity/tasks"]) == ["trinity/tasks.py"]
