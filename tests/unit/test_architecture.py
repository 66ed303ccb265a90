"""The floors docs/ARCHITECTURE.md draws: every module of trinity/ sits on one floor and imports only from
floors below it or from its own part (function-level imports included), no import circle exists between
modules, and nothing in the library imports the flows. No list of exceptions: a new import that goes up
or sideways fails here, and so does a new part that has no floor."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top. A part is a sub-package of trinity (or a top-level module); it may import its own
# modules and any part on a lower floor, never one on its own floor or above.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("trinity", "errors", "files", "seeding", "progress", "contracts", "stats", "sandbox", "port_owner")),
    ("config schema", ("config_schema",)),
    ("assets", ("setup",)),
    ("parts", ("tasks", "pool", "coordinator", "models")),
    ("episodes and routers", ("episodes", "routers")),
    ("training, evaluation, recording", ("evolve", "eval", "record")),
    ("simulated world", ("simulated",)),
    ("assembly", ("assembly",)),
    ("compose", ("config",)),
    ("pipeline", ("pipeline",)),
    ("app", ("plan", "repro", "serve", "config_reference")),
    ("command line", ("cli",)),
]
FLOOR_OF = {part: i for i, (_, parts) in enumerate(FLOORS) for part in parts}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (ROOT / "trinity").rglob("*.py")}


@functools.cache
def parsed(text: str) -> ast.Module:
    """One parse per source text: the checks below each walk every module (callers only read the tree)."""
    return ast.parse(text)


def part_of(module: str) -> str:
    names = module.split(".")
    return names[1] if len(names) > 1 else "trinity"


def _resolve(name: str) -> str | None:
    """The longest prefix of a dotted name that is a module of trinity/ (an imported attribute drops off)."""
    names = name.split(".")
    for n in range(len(names), 0, -1):
        if ".".join(names[:n]) in MODULES:
            return ".".join(names[:n])
    return None


def imports_of(module: str) -> set[str]:
    """Modules of trinity/ that `module` imports anywhere (top level or inside functions), with the packages
    an import runs on the way (importing a.b.c runs a/__init__ and a/b/__init__)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {_resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:   # `from pkg import module` imports the module
                found.add(_resolve(f"{base}.{alias.name}") or _resolve(base))
    found.discard(None)
    for target in list(found):
        names = target.split(".")
        found |= {".".join(names[:n]) for n in range(2, len(names))}
    found.discard(module)
    return {t for t in found if not module.startswith(t + ".")}   # a module's own packages are already loaded


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_part_has_a_floor():
    missing = sorted({part_of(m) for m in MODULES} - set(FLOOR_OF))
    assert not missing, f"parts of trinity/ with no floor in FLOORS (and docs/ARCHITECTURE.md): {missing}"


@pytest.mark.parametrize("part", sorted({part_of(m) for m in MODULES}))
def test_a_part_imports_only_from_lower_floors(part):
    floor = FLOOR_OF[part]
    broken = sorted(f"{m} -> {t} ({FLOORS[FLOOR_OF[part_of(t)]][0]})"
                    for m, targets in GRAPH.items() if part_of(m) == part
                    for t in targets if part_of(t) != part and FLOOR_OF[part_of(t)] >= floor)
    assert not broken, (f"trinity/{part} is on floor '{FLOORS[floor][0]}' and imports upward or sideways:\n"
                        + "\n".join(broken))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_between_modules():
    circles = _cycles(GRAPH)
    assert not circles, "import circles (lazy imports included):\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_lazy_imports_and_packages():
    assert "trinity.assembly.local_pool" in GRAPH["trinity.cli"]        # imported inside a function
    assert "trinity.simulated.launcher" in GRAPH["trinity.assembly.local_pool"]
    assert "trinity.pool.servers" in GRAPH["trinity.simulated.launcher"]
    assert "trinity.pool" in GRAPH["trinity.simulated.launcher"]       # the package runs on the way


def test_the_library_never_imports_the_flows():
    for module, path in MODULES.items():
        for node in ast.walk(parsed(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not any(n == "flows" or n.startswith("flows.") for n in names), module


def test_the_floors_are_the_documented_ones():
    """docs/ARCHITECTURE.md lists the floors top down, one line each: `N. name: `part`, `part``."""
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    documented = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\. ([^:]+): (.*)$", line)
        if m and "`" in m.group(3):
            documented[int(m.group(1))] = (m.group(2).strip(), tuple(re.findall(r"`([a-z_]+)`", m.group(3))))
    expected = {i: (name, parts) for i, (name, parts) in enumerate(FLOORS)}
    assert documented == expected


CONFIG_FLOOR = ("config_schema", "config", "config_reference")
# A config value read with a default of the reader's own, in any of four shapes:
#   OmegaConf.select(cfg, "k", default=...)         cfg.<group>.get("k", default)
#   OmegaConf.select(cfg, "k") or <fallback>         cfg.<group>.get("k") or <literal>
# where the config is a name `cfg`, `mcfg` or `<something>_cfg`. Outside the config floor such reads use the
# typed config's attributes (or `section` for a node), so each default lives once, in the schema. (`or name`, a
# fallback computed from another value, is not a default.)
_CONFIG_NAMES = re.compile(r"^(m?cfg|[a-z_]+_cfg)$")


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_select(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "select"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "OmegaConf")


def _is_config_get(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and bool(_CONFIG_NAMES.match(_root(node.func.value) or "")))


def _is_fallback(node: ast.AST) -> bool:
    """A literal (number, string, list, dict, ...) or a Path(...) built on the spot."""
    if isinstance(node, (ast.Constant, ast.List, ast.Dict, ast.Tuple, ast.Set)):
        return True
    if isinstance(node, ast.BinOp):
        return _is_fallback(node.left) or _is_fallback(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path"


def own_defaults(text: str) -> list[str]:
    hits = []
    for node in ast.walk(parsed(text)):
        if (_is_select(node) and any(k.arg == "default" for k in node.keywords)
                or _is_config_get(node) and len(node.args) == 2):
            hits.append(ast.unparse(node))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            first, rest = node.values[0], node.values[1:]
            if (_is_select(first) or _is_config_get(first)) and any(_is_fallback(v) for v in rest):
                hits.append(ast.unparse(node))
    return hits


def test_config_defaults_live_only_in_the_schema():
    paths = [path for module, path in MODULES.items() if part_of(module) not in CONFIG_FLOOR]
    paths += sorted((ROOT / "flows").glob("*.py"))
    found = {str(path.relative_to(ROOT)): hits for path in paths if (hits := own_defaults(path.read_text()))}
    assert not found, ("config read with a default of its own outside the config floor (use "
                       f"the typed config's attributes, or trinity.config_schema.section(...) for a node): {found}")


# The floors below the pipeline see sections, never the whole config: only the pipeline (and the app and the
# command line above it) reads the config as a whole and hands each part its typed section.
SECTION_ONLY = ("trinity", "errors", "files", "seeding", "progress", "contracts", "stats", "setup", "tasks", "pool",
                "coordinator", "models", "episodes", "routers", "evolve", "eval", "record", "simulated")
_WHOLE_CONFIG_READERS = ("group", "setting")   # trinity.config_schema's readers of a whole config


def whole_config_reads(text: str) -> list[str]:
    """`cfg.<group>` (a config group read off a whole config) and imports of the schema's whole-config readers."""
    import dataclasses

    from trinity.config_schema.root import TrinityConfig

    groups = {f.name for f in dataclasses.fields(TrinityConfig)}
    hits = []
    for node in ast.walk(parsed(text)):
        if (isinstance(node, ast.Attribute) and node.attr in groups and isinstance(node.value, ast.Name)
                and _CONFIG_NAMES.match(node.value.id)):
            hits.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module == "trinity.config_schema":
            hits += [f"import {a.name}" for a in node.names if a.name in _WHOLE_CONFIG_READERS]
    return hits


def test_the_floors_below_the_pipeline_read_sections_not_the_whole_config():
    found = {str(path.relative_to(ROOT)): hits for module, path in MODULES.items()
             if part_of(module) in SECTION_ONLY and (hits := whole_config_reads(path.read_text()))}
    assert not found, ("a part below the pipeline reads the whole config; give it its typed section from the "
                       f"pipeline instead: {found}")


def test_the_whole_config_finder_finds_both_shapes():
    assert whole_config_reads("n = int(cfg.protocol.max_turns)")
    assert whole_config_reads("from trinity.config_schema import group, section")
    assert not whole_config_reads("from trinity.config_schema import section")
    assert not whole_config_reads("n = cfg.max_turns")          # a section named cfg
    assert not whole_config_reads("members = group(ctx)")       # a local function named group


def test_the_default_finder_finds_both_shapes():
    assert own_defaults('x = OmegaConf.select(cfg, "evolve.warm_start", default=None)')
    assert own_defaults('n = int(cfg.evolve.get("repeats", 1))')
    assert not own_defaults('x = group(cfg, "evolve").warm_start')
    assert not own_defaults('r = manifest.get("runs", [])')
    assert own_defaults('p = Path(OmegaConf.select(cfg, "paths.frontier") or Path(cfg.paths.data) / "frontier")')
    assert own_defaults('w = int(cfg.runner.get("dask_workers") or 2)')
    assert own_defaults('c = model_cfg.get("max_tokens", 512)')
    assert not own_defaults('i = str(model_cfg.get("model_id") or name)')
    assert not own_defaults('v = OmegaConf.select(cfg, "eval.moa")')


# One config reader where a whole config is read (the stages, the assembly floor, serving, the flows): the typed
# config's attributes; no `group()` or `setting()` (trinity.config_schema has none any more), `OmegaConf.select`
# nowhere.
TYPED_READERS = ("pipeline", "assembly", "serve")


def config_reader_calls(text: str) -> list[str]:
    """Calls of the schema's whole-config readers (`group(...)`, `setting(...)`) and of `OmegaConf.select`."""
    return [ast.unparse(node) for node in ast.walk(parsed(text))
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _WHOLE_CONFIG_READERS)
            or _is_select(node)]


def test_the_stages_flows_and_serving_read_the_typed_config():
    paths = [path for module, path in MODULES.items() if part_of(module) in TYPED_READERS]
    paths += sorted((ROOT / "flows").glob("*.py"))
    found = {str(path.relative_to(ROOT)): hits for path in paths if (hits := config_reader_calls(path.read_text()))}
    assert not found, ("a whole config read through group()/setting()/OmegaConf.select; read the typed config's "
                       f"attributes (the typed config the edge hands down): {found}")


def test_the_reader_call_finder_finds_each_shape():
    assert config_reader_calls('w = group(cfg, "evolve").warm_start')
    assert config_reader_calls('s = setting(cfg, "seed")')
    assert config_reader_calls('x = OmegaConf.select(cfg, "eval.moa")')
    assert not config_reader_calls("w = cfg.evolve.warm_start")
    assert not config_reader_calls("m = re.match(p, t).group(1)")       # a method named group


def test_serving_imports_no_pipeline_module():
    """A server loads a coordinator and starts a pool through trinity.assembly, never through stage code."""
    serving = {m: GRAPH[m] for m in MODULES if part_of(m) == "serve"}
    stage_code = sorted(f"{m} -> {t}" for m, targets in serving.items() for t in targets if part_of(t) == "pipeline")
    assert not stage_code, "serving imports pipeline modules:\n" + "\n".join(stage_code)


# Typed once, at the edge: the composed document (OmegaConf's DictConfig) is the config floor's own business.
# Everything above it reads the typed config; what must see the config exactly as written (a run's key, a
# recording's manifest) asks trinity.config (as_written), never the document.
DOCUMENT_FLOOR = ("config_schema", "config")
_DOCUMENT_NAMES = re.compile(r"\b(DictConfig|ListConfig|OmegaConf|omegaconf)\b")


def document_uses(text: str) -> list[str]:
    """Lines that name OmegaConf or its nodes, and reads of a typed config's `composed` document."""
    hits = [line.strip() for line in text.splitlines() if _DOCUMENT_NAMES.search(line)]
    hits += [ast.unparse(node) for node in ast.walk(parsed(text))
             if isinstance(node, ast.Attribute) and node.attr == "composed"]
    return hits


def test_the_document_finder_finds_each_kind_of_use():
    assert document_uses("from omegaconf import DictConfig\nx = 1") == ["from omegaconf import DictConfig"]
    assert document_uses("y = cfg.composed.pool") == ["cfg.composed"]
    assert document_uses("z = cfg.pool.models") == []


def test_the_composed_document_stays_in_the_config_floor():
    paths = [path for module, path in MODULES.items() if part_of(module) not in DOCUMENT_FLOOR]
    paths += sorted((ROOT / "flows").glob("*.py"))
    found = {str(path.relative_to(ROOT)): hits for path in paths if (hits := document_uses(path.read_text()))}
    assert not found, ("OmegaConf or a typed config's composed document outside the config floor (type the config "
                       f"once at the edge and hand down typed sections; trinity.config.as_written for the config "
                       f"as written): {found}")


# Up to the assembly floor a part is handed its typed config or section and never types a config itself.
_TYPING_CALLS = ("typed", "conform", "group", "setting")
_CONFIG_MODULES = ("trinity.config", "trinity.config_schema")


def typing_uses(text: str) -> list[str]:
    """Imports of the config floor's typing functions, and calls of them through the imported module."""
    tree = parsed(text)
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "trinity" for a in node.names if a.name in ("config", "config_schema")}
    aliases |= {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for a in node.names if a.name in _CONFIG_MODULES}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in _CONFIG_MODULES:
            hits += [f"import {a.name}" for a in node.names if a.name in _TYPING_CALLS]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TYPING_CALLS
              and ast.unparse(node.func.value) in aliases):
            hits.append(ast.unparse(node))
    return hits


def test_the_typing_finder_finds_imports_and_calls_through_the_module():
    text = ("from trinity.config import typed, load\nfrom trinity import config as c\nx = c.conform(doc)\n"
            "y = m.group(1)\nfrom trinity.config_schema import section")
    assert typing_uses(text) == ["import typed", "c.conform(doc)"]


def test_the_floors_up_to_the_assembly_never_type_a_config():
    below = [module for module in MODULES if FLOOR_OF[part_of(module)] <= FLOOR_OF["assembly"]
             and part_of(module) != "config_schema"]
    found = {str(MODULES[m].relative_to(ROOT)): hits for m in below if (hits := typing_uses(MODULES[m].read_text()))}
    assert not found, f"a part types a config itself (hand it its typed section instead): {found}"


# Typed once, at the edge. A composed document becomes the typed config in the config floor (trinity.config's
# `load`, `with_values`, `typed`), which the entry points call: the command line and the flows' config loading
# (flows/_common.py). serve's entry point and the stage entry points are handed the typed config they call with.
# Every other module of trinity/ and flows/ receives a TrinityConfig or its sections and never types one.
TYPING_EDGES = ("trinity/config.py", "trinity/config_schema/__init__.py", "trinity/cli.py", "flows/_common.py")


def test_a_config_is_typed_only_at_the_edges():
    paths = [*MODULES.values(), *sorted((ROOT / "flows").glob("*.py"))]
    found = {rel: hits for path in paths if (rel := str(path.relative_to(ROOT))) not in TYPING_EDGES
             and (hits := typing_uses(path.read_text()))}
    assert not found, (f"a config typed below the edges {TYPING_EDGES}: load it once there and hand the typed config "
                       f"(trinity.config_schema.TrinityConfig) or its sections down: {found}")


def test_the_typing_edges_exist():
    assert all((ROOT / edge).is_file() for edge in TYPING_EDGES)
