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
def test_stage_deps_name_only_code_it_imports(stage):
    """No code dep beyond what the stage imports, so an edit elsewhere does not rerun it
    (`python scripts/dvc_deps.py` rewrites the code deps after an import changes)."""
    module, spec = FLOW_STAGES[stage]
    code = [d for d in _paths(spec.get("deps")) if d.split("/")[0] in PACKAGES]
    expected = minimal_deps(ROOT, reachable_files(ROOT, module))
    assert code == expected, (f"stage {stage!r}: code deps differ from its imports; run `python scripts/dvc_deps.py`."
                              f" extra: {sorted(set(code) - set(expected))}, missing: {sorted(set(expected) - set(code))}")


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


# ------------------------------------------------------------------ deps shrink with the imports (dvc status)


def _dvc(repo: Path, *args: str) -> str:
    import subprocess
    import sys

    dvc = Path(sys.executable).parent / "dvc"
    result = subprocess.run([str(dvc), *args], cwd=repo, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"dvc {' '.join(args)}: {result.stdout}\n{result.stderr}"
    return result.stdout


def _stale(repo: Path, stages: tuple[str, ...]) -> set[str]:
    """The stages `dvc status` says must rerun (changed deps), by name."""
    import json

    return {name.split(":")[-1] for name in json.loads(_dvc(repo, "status", "--json", *stages) or "{}")}


@pytest.mark.integration
def test_an_edit_reruns_only_the_stages_whose_code_imports_it(tmp_path):
    """A committed prepare and cache_states stay up to date in `dvc status` after an edit to the evolution
    loop (which neither imports), and both go stale after an edit to the task suites (which both import)."""
    import shutil

    repo = tmp_path / "repo"
    for folder in ("flows", "trinity"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy2(ROOT / name, repo / name)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    recording = repo / params["record"]["dir"] / params["record"]["name"]
    for path in (recording / "manifest.json", repo / "data/prepared/suite.parquet", repo / "data/states/index.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    (repo / "metrics").mkdir()
    (repo / "metrics/states.json").write_text("{}\n")
    _dvc(repo, "init", "--no-scm", "-q")
    _dvc(repo, "commit", "--force", "-q", "prepare", "cache_states")   # as if both had just run
    stages = ("prepare", "cache_states")
    assert _stale(repo, stages) == set()

    with (repo / "trinity/evolve/loop.py").open("a") as f:
        f.write("\n# an edit to the evolution loop\n")
    assert _stale(repo, stages) == set(), "editing trinity/evolve/loop.py must not rerun prepare or cache_states"

    with (repo / "trinity/tasks/registry.py").open("a") as f:
        f.write("\n# an edit to the task suites\n")
    assert _stale(repo, stages) == {"prepare", "cache_states"}
