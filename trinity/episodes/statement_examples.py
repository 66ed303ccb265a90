"""The examples a coding task's statement gives, read as cases a checking Verifier can run.

Statements write their examples in many forms; each becomes a `Case` (a call and its expected value):

- doctest: `>>> f(x)` with the expected value on the line(s) below, or `>>> f(x) == y` on one line;
- a call and its value on one line: `f(x) == y`, `f(x) = y`, `f(x) ==> y`, `f(x) => y`, `f(x) # => y`,
  `f(x) ➞ y`, `f(x) -> y`, `f(x) returns y`, `f(x) should return y.`, `assert f(x) == y`; a working before
  the value (`f(x) == 1 + 9 = 10`) keeps the value after the last `=`; a remark after it
  (`'No' (the name should ...)`) is dropped;
- an `Input:` / `Output:` block naming the arguments (`arr = [1, 2], k = 3`, or one `name : value` per line),
  matched to the function's parameters by name, else by position.

Only what can be read without guessing becomes a case: outside doctest, the call must be to the task's own
function with literal arguments, and the expected value a Python literal. A line that reads otherwise
(`tri(n) = 1 + n / 2`, a recurrence; a quote out of place) gives no case, so a check never fails an answer on
a statement it could not read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One example to run: `source` is an expression compared with `expected` (a doctest line), or an
    assert statement (`expected` None)."""
    source: str
    expected: str | None = None

    def show(self) -> str:
        return self.source if self.expected is None else f"{self.source} == {self.expected}"


_SEPARATORS = ("==>", "=>", "➞", "->", "==", "=", " should return ", " returns ", " should be ", " gives ")
_INPUT = re.compile(r"^\s*Input\s*:\s*(.*)$", re.IGNORECASE)
_OUTPUT = re.compile(r"^\s*Output\s*:\s*(.*)$", re.IGNORECASE)
_NAMED = re.compile(r"(?:^|,)\s*([A-Za-z_]\w*)\s*[=:]\s*")


def examples(code: str, function: str | None) -> list[Case]:
    """Every example `code` (the statement's Python block) gives, doctest ones first, without repeats."""
    cases = _doctest_cases(code)
    if function is not None:
        params = parameters(code, function)
        cases += _call_lines(code, function) + _input_output_blocks(code, function, params)
    seen: set[tuple[str, str | None]] = set()
    out = []
    for case in cases:
        key = (_normal(case.source), case.expected if case.expected is None else _normal(case.expected))
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


def parameters(code: str, function: str) -> list[str]:
    """The parameter names of `def function(...)` in `code` (empty where it does not parse)."""
    match = re.search(rf"^\s*def\s+{re.escape(function)}\s*\((.*?)\)\s*(->[^:]*)?:", code, re.MULTILINE | re.DOTALL)
    if match is None:
        return []
    try:
        tree = ast.parse(f"def f({match.group(1)}): pass")
    except SyntaxError:
        return []
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


# ------------------------------------------------------------------------------------------ the forms

def _doctest_cases(code: str) -> list[Case]:
    lines = code.splitlines()
    cases: list[Case] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line.startswith(">>>"):
            i += 1
            continue
        source = line[3:].strip()
        expected: list[str] = []
        j = i + 1
        while j < len(lines):
            nxt = lines[j].strip()
            if not nxt or nxt.startswith(">>>") or nxt.startswith('"""') or nxt.startswith("'''"):
                break
            expected.append(nxt)
            j += 1
        if source and expected and parses(source, "eval"):
            cases.append(Case(source, " ".join(expected)))
        elif source and not expected:
            case = _split_call_line(source, None)   # `>>> f(x) == y`, its value on the same line
            if case is not None:
                cases.append(case)
        i = j
    return cases


def _call_lines(code: str, function: str) -> list[Case]:
    cases = []
    for raw in code.splitlines():
        line = raw.strip()
        if line.startswith(">>>"):
            continue
        line = re.sub(r"^(assert|print)\s+", "", line)
        if not line.startswith(f"{function}("):
            continue
        case = _split_call_line(line, function)
        if case is not None:
            cases.append(case)
    return cases


def _split_call_line(line: str, function: str | None) -> Case | None:
    """`call SEP value` as a case, trying each separator at each place; None if no split reads cleanly."""
    for sep in _SEPARATORS:
        start = 0
        while (at := line.find(sep, start)) >= 0:
            start = at + 1
            left, right = line[:at].rstrip().rstrip("#").rstrip(), line[at + len(sep):]
            if sep == "=" and (line[at - 1:at] in "=!<>" or line[at + 1:at + 2] == "="):
                continue   # part of ==, !=, <=, >=
            call = _literal_call(left, function)
            value = _value(right)
            if call is not None and value is not None:
                return Case(call, value)
    return None


def _input_output_blocks(code: str, function: str, params: list[str]) -> list[Case]:
    lines = code.splitlines()
    cases = []
    i = 0
    while i < len(lines):
        match = _INPUT.match(lines[i])
        if match is None:
            i += 1
            continue
        given = [match.group(1)]
        j = i + 1
        while j < len(lines) and _OUTPUT.match(lines[j]) is None and _INPUT.match(lines[j]) is None:
            if not lines[j].strip() and len(given) > 1:
                break
            given.append(lines[j])
            j += 1
        if j < len(lines) and (out := _OUTPUT.match(lines[j])) is not None:
            args = _named_arguments(" ,".join(g.strip() for g in given if g.strip()), params)
            value = _value(out.group(1))
            if args is not None and value is not None:
                cases.append(Case(f"{function}({args})", value))
        i = j + 1
    return cases


def _named_arguments(text: str, params: list[str]) -> str | None:
    """`a = [1, 2], k = 3` (or `a : ...`) as the call's argument list: by name where every name is a
    parameter, else by position where the counts agree; one unnamed literal fills a one-parameter function."""
    marks = list(_NAMED.finditer(text))
    if not marks:
        value = _value(text)
        return value if value is not None and len(params) == 1 else None
    names, values = [], []
    for k, mark in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
        value = _value(text[mark.end():end].strip().rstrip(","))
        if value is None:
            return None
        names.append(mark.group(1))
        values.append(value)
    if set(names) <= set(params) and len(set(names)) == len(names):
        return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
    if len(values) == len(params):
        return ", ".join(values)
    return None


# ------------------------------------------------------------------------------------------ reading safely

def _literal_call(text: str, function: str | None) -> str | None:
    """`text` as a call with literal arguments (to `function` when given), normalised; else None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    if function is not None and node.func.id != function:
        return None
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        if isinstance(arg, ast.Starred) or not _is_literal(arg):
            return None
    if any(k.arg is None for k in node.keywords):
        return None
    return ast.unparse(node)


def _value(text: str) -> str | None:
    """The expected value written in `text` as a Python literal (normalised), trying the text whole, before a
    remark (`#`, ` (`), and after a working's last `=`; None if none reads."""
    text = text.strip().rstrip(";").strip()
    if text.endswith(".") and not text[-2:-1].isdigit():
        text = text[:-1]   # a sentence's full stop, not a decimal point
    tries = [text, text.split(" #")[0], text.split("#")[0]]
    if not text.startswith("("):
        tries.append(text.split(" (")[0])
    if "=" in text:
        tries.append(text.rsplit("=", 1)[1])
    for t in tries:
        t = t.strip().rstrip(",").strip()
        if not t:
            continue
        try:
            node = ast.parse(t, mode="eval").body
        except (SyntaxError, ValueError):
            continue
        if _is_literal(node):
            return ast.unparse(node)
    return None


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def parses(source: str, mode: str) -> bool:
    """Whether `source` is Python in `mode` ("eval": one expression, "exec": statements)."""
    try:
        ast.parse(source, mode=mode)
        return True
    except (SyntaxError, ValueError):
        return False


def _normal(source: str) -> str:
    try:
        return ast.unparse(ast.parse(source, mode="eval"))
    except (SyntaxError, ValueError):
        return source.strip()
