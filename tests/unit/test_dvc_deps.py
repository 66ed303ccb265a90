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

from pathlib import Path

import pytest
from dvc_analysis import (
    PACKAGES,
    ROOT,
    _covers,
    _flow_stages,
    _paths,
    minimal_deps,
    module_file,
    reachable_files,
    uncovered,
)

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
                              f" extra: {sorted(set(code) - set(expected))}, missing: "
                              f"{sorted(set(expected) - set(code))}")


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
        "app/main.py": "import os\nfrom app import eager\n\ndef run():\n    from app.lazy import thing\n"
                       "    return thing\n",
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
