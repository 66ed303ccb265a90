"""Runtime objects (event loop, pool client, coordinator, graders, stores) are built once per stage by the
assembly floor and handed down (trinity.assembly.runtime, trinity.pipeline.stage_runtime): no module or class
of trinity/ or flows/ keeps them in a process-wide store, and nothing looks one up by its config. Checked on the
source, like tests/unit/test_architecture.py, with no list of exceptions:

- a mapping that a module or a class starts empty (`{}`, `dict()`, `OrderedDict()`, `defaultdict(...)`, a weak
  dictionary) is a store filled as the process runs; it must say what it holds, and what it holds must be
  classes, functions or plain data, never a live object (a runtime, a context, a client, a coordinator) nor an
  unnamed bundle (`Any`, a tuple);
- no function cached with `functools.cache`/`lru_cache` returns a live object;
- no `SomeClass.get(cfg)`-style lookup of an object by its config.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "trinity").rglob("*.py")) + sorted((ROOT / "flows").rglob("*.py"))

_MAPPINGS = {"dict", "OrderedDict", "defaultdict", "WeakValueDictionary", "WeakKeyDictionary"}
# What a store may hold: classes, functions and plain data (config documents included).
_DATA = {"str", "int", "float", "bool", "bytes", "None", "Path", "DictConfig", "frozenset", "set", "list", "dict",
         "Mapping", "Sequence"}
_HOLDERS = {"type", "Callable", "ClassVar"}
# Live objects by name: what a stage builds and must hand down instead of keeping.
_LIVE = re.compile(r"(Runtime|Context|Client|Coordinator|Backbone|LoopThread|Pool|Grader|Service|Store)$")
_CONFIG_NAMES = re.compile(r"^(m?cfg|config|variant|[a-z_]+_cfg)$")


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return None


def _starts_empty(value: ast.AST | None) -> bool:
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.Call) and _name(value.func) in _MAPPINGS:
        return not value.keywords and (_name(value.func) == "defaultdict" or not value.args)
    return False


def _held_type_problems(annotation: ast.AST, *, store: bool = True, any_ok: bool = False) -> list[str]:
    """Why the values an annotation allows are not classes, functions or plain data (empty: they are). `store`:
    the annotation is the store's own (its values are checked); `any_ok`: inside plain data (a document)."""
    if isinstance(annotation, ast.BinOp):   # X | Y
        return (_held_type_problems(annotation.left, store=store, any_ok=any_ok)
                + _held_type_problems(annotation.right, store=store, any_ok=any_ok))
    if isinstance(annotation, ast.Subscript):
        outer = _name(annotation.value)
        parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if outer == "ClassVar":
            return _held_type_problems(parts[0], store=store, any_ok=any_ok)
        if outer in ("type", "Callable"):
            return []
        if store and outer in _MAPPINGS | {"Mapping"}:
            return _held_type_problems(parts[-1], store=False)   # the values (the keys are names or ids)
        if outer == "tuple":
            return [f"an unnamed bundle {ast.unparse(annotation)}"]
        problems = [] if outer in _DATA else [ast.unparse(annotation)]
        return problems + [p for part in parts for p in _held_type_problems(part, store=False, any_ok=True)]
    name = _name(annotation)
    if name == "Any":
        return [] if any_ok else ["values of any kind (Any)"]
    if name == "tuple":
        return [f"an unnamed bundle {name}"]
    if name is None or name not in _DATA or _LIVE.search(name):
        return [ast.unparse(annotation)]
    return []


def _filled(tree: ast.AST, name: str | None) -> bool:
    """Something writes into the mapping `name` (`name[k] = v`, `x.name[k] = v`, `name.setdefault(...)`, ...)."""
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, ast.Subscript) and _name(t.value) == name for t in targets):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("setdefault", "update", "__setitem__") and _name(node.func.value) == name):
            return True
    return False


def store_problems(text: str) -> list[str]:
    """Module- and class-level mappings that start empty and may hold live objects (module doc)."""
    tree = ast.parse(text)
    scopes = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    hits = []
    for body in scopes:
        for st in body:
            if isinstance(st, ast.Assign) and _starts_empty(st.value):
                hits.append(f"{ast.unparse(st)}: a store that does not say what it holds")
            elif isinstance(st, ast.AnnAssign) and _starts_empty(st.value):
                held = _held_type_problems(st.annotation)
                if held == ["values of any kind (Any)"] and not _filled(tree, _name(st.target)):
                    continue   # a constant left empty (a class's defaults a subclass replaces), never filled
                if held:
                    hits.append(f"{ast.unparse(st)}: holds {', '.join(held)}")
    return hits


def cached_live_objects(text: str) -> list[str]:
    """Functions cached process-wide (functools.cache / lru_cache) whose return type names a live object."""
    hits = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.returns is None:
            continue
        cached = any(_name(d.func if isinstance(d, ast.Call) else d) in ("cache", "lru_cache")
                     for d in node.decorator_list)
        returned = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.returns)
                    if isinstance(n, (ast.Name, ast.Attribute))}
        if cached and any(_LIVE.search(r) for r in returned):
            hits.append(f"{node.name} -> {ast.unparse(node.returns)}")
    return hits


def lookups_by_config(text: str) -> list[str]:
    """`SomeClass.get(cfg, ...)`: an object looked up by its config in a store its class keeps."""
    return [ast.unparse(node) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.func.value.id[:1].isupper()
            and node.args and isinstance(node.args[0], ast.Name) and _CONFIG_NAMES.match(node.args[0].id)]


def _found(check) -> dict[str, list[str]]:
    return {str(path.relative_to(ROOT)): hits for path in SOURCES if (hits := check(path.read_text()))}


def test_no_module_or_class_keeps_a_store_of_live_objects():
    found = _found(store_problems)
    assert not found, ("a module or class keeps a process-wide store that may hold runtime objects; build them "
                       f"once per stage in trinity.assembly and hand them down: {found}")


def test_no_cached_function_returns_a_live_object():
    found = _found(cached_live_objects)
    assert not found, f"a process-wide cache of runtime objects (build them once per stage instead): {found}"


def test_nothing_looks_a_runtime_up_by_its_config():
    found = _found(lookups_by_config)
    assert not found, f"a lookup of an object by its config (hand the stage's runtime down instead): {found}"


def test_the_finders_find_what_the_old_registry_did():
    old = ("class RolloutContext:\n"
           "    _instances: dict[str, RolloutContext] = {}\n"
           "_SETUPS: dict[str, tuple] = {}\n"
           "_CLIENTS = {}\n"
           "_BY_KEY: dict[str, Any] = {}\n"
           "def put(key, value):\n    _BY_KEY[key] = value\n"
           "_LOOPS: dict[str, list[LoopThread]] = {}\n")
    assert len(store_problems(old)) == 5
    assert store_problems("_REGISTRY: dict[str, type[Strategy]] = {}\n"
                          "_FACTORIES: dict[str, Callable[[str], Method]] = {}\n"
                          "_COMPOSED: dict[tuple, DictConfig] = {}\n"
                          "_HINTS: dict[type, dict[str, Any]] = {}\n"
                          "class S:\n    option_defaults: ClassVar[dict[str, Any]] = {}\n"
                          "TABLE = {'a': 1}\n") == []
    assert lookups_by_config("ctx = RolloutContext.get(cfg, key=key)") == ["RolloutContext.get(cfg, key=key)"]
    assert lookups_by_config("x = mapping.get(cfg)\ny = Thing.get('name')") == []
    assert cached_live_objects("@functools.lru_cache(maxsize=4)\ndef pool_for(key: str) -> PoolClient: ...")
    assert not cached_live_objects("@lru_cache(maxsize=1)\ndef judge_prompts() -> dict[str, dict[str, Any]]: ...")
