"""The suite registry is a plain name -> class mapping: a fresh import finds every suite with nothing
called first, every suite class is in it, and the task modules import it without a cycle."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import trinity.tasks
from trinity.tasks.base import TaskSuite
from trinity.tasks.registry import SUITES

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "trinity" / "tasks"
NAMES = ["aime", "aime2024", "aime2025", "bigcodebench", "gpqa_diamond", "gsm8k", "humaneval", "livecodebench",
         "math500", "math500_full", "mbpp", "mmlu", "mtbench", "rlpr"]


def test_a_fresh_import_finds_every_suite():
    for code in ("from trinity.tasks.registry import SUITES; print(sorted(SUITES))",
                 "import trinity.tasks.registry as r; print(r.suite_names())"):
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert ast.literal_eval(out.stdout.strip()) == NAMES


def test_every_suite_class_is_registered_under_its_name():
    assert all(SUITES[name].name == name for name in SUITES)
    concrete = set()
    todo = [TaskSuite]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if not inspect.isabstract(cls) and cls.__module__.startswith("trinity.tasks.") and "name" in vars(cls):
            concrete.add(cls)
    assert concrete == set(SUITES.values())
    assert trinity.tasks.SUITES is SUITES and trinity.tasks.get_suite("gsm8k").name == "gsm8k"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> tuple[set[str], bool]:
    """Modules of trinity.tasks that `path` imports anywhere in its body (a `from pkg import name` of a
    non-module name counts as importing pkg), and whether any import sits inside a function."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    nested = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested |= any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if _file(sub) else base)
    return {m for m in found if m == "trinity.tasks" or m.startswith("trinity.tasks.")}, nested


def _file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


GRAPH = {_module_name(p): _imports(p)[0] for p in TASKS.rglob("*.py")}


def _reachable(start: str) -> set[str]:
    seen, todo = set(), list(GRAPH.get(start, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += GRAPH.get(m, ())
    return seen


def test_nothing_the_registry_imports_imports_it_back():
    assert "trinity.tasks.registry" in GRAPH
    below = _reachable("trinity.tasks.registry")
    assert {"trinity.tasks.base", "trinity.tasks.suites_online", "trinity.tasks.graders.code"} <= below
    assert "trinity.tasks.registry" not in below
    assert "trinity.tasks" not in below   # the package re-exports the registry
    assert not _imports(TASKS / "registry.py")[1], "the registry imports at module level only"


def test_the_task_modules_import_without_a_cycle():
    for module in GRAPH:
        assert module not in _reachable(module), f"{module} imports itself back"
