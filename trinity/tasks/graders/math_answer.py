"""Math answers: extract the final answer from a reply and decide equivalence with the reference.

Equivalence: normalised string equality, then exact rational comparison of plain numbers, then sympy
(simplify(a - b) == 0, or numeric closeness) in a separate worker process with a time limit. Model
output is never eval'ed unchecked: only whitelisted identifiers reach sympy's parser.
"""

from __future__ import annotations

import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from fractions import Fraction
import multiprocessing
import threading

SYMPY_TIMEOUT_S = 5.0


# ---------------------------------------------------------------- extraction
def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the {...} group opening at text[start] and the index after it."""
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    j = idx + (6 if text.startswith("\\boxed", idx) else 5)
    while j < len(text) and text[j] == " ":
        j += 1
    if j < len(text) and text[j] == "{":
        got = _braced(text, j)
        return got[0].strip() if got else None
    m = re.match(r"\s*([^\s$]+)", text[j:])
    return m.group(1) if m else None


_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_math_answer(reply: str) -> str:
    """\\boxed{...} > '#### x' > 'answer is x' > 'Answer: x' > the last number ('' when nothing)."""
    boxed = last_boxed(reply)
    if boxed is not None:
        return boxed
    hashes = re.findall(r"####\s*([^\n]+)", reply)
    if hashes:
        return hashes[-1].strip()
    stated = re.findall(r"answer\s+is\s*:?\s*([^\n]+)", reply, flags=re.IGNORECASE) or \
        re.findall(r"answer\s*:\s*([^\n]+)", reply, flags=re.IGNORECASE)
    if stated:
        answer = stated[-1].strip()
        if "$" in answer and answer.count("$") >= 2 and not re.match(r"^\$?\d", answer.replace("\\$", "")):
            inner = re.findall(r"\$([^$]+)\$", answer)
            if inner:
                return inner[0].strip()
        # the sentence ends at a period followed by a space or the end ("The answer is 7. <idea>...</idea>");
        # a decimal point is never followed by a space
        answer = re.split(r"\.(?=\s|$)", answer)[0]
        return answer.strip().strip("*").strip()
    numbers = _NUMBER.findall(reply)
    return numbers[-1] if numbers else ""


# ---------------------------------------------------------------- normalisation
_UNIT_WORDS = r"(?:dollars?|cents?|units?|square\s+\w+|sq\.?\s*\w+|meters?|cm|mm|km|m|inches|inch|feet|foot|ft|" \
              r"miles?|hours?|minutes?|seconds?|days?|weeks?|years?|degrees?|pounds?|lbs?|kg|g|grams?|" \
              r"percent|mph|students?|people|apples?|points?|ways?|times?)"


def normalize(answer: str) -> str:
    s = str(answer).strip()
    s = re.sub(r"\\text\{\s*([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mbox|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", s)
    for token in ("\\!", "\\,", "\\;", "\\:", "\\ ", "\\left", "\\right", "\\displaystyle", "\\$", "$"):
        s = s.replace(token, "" if token != "\\ " else " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s).replace("°", "")
    s = s.replace("\\%", "").replace("%", "")
    s = re.sub(r"^\s*[a-zA-Z]\s*=\s*", "", s)           # "x = 5" -> "5"
    s = re.sub(r"\s+", " ", s).strip()
    s = s.rstrip(".").strip()
    while re.search(r"(\d),(\d{3})(?!\d)", s):           # thousands separators
        s = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", s)
    s = re.sub(rf"^(-?[\d.]+(?:/\d+)?)\s*{_UNIT_WORDS}(?:\s+\w+)*$", r"\1", s, flags=re.IGNORECASE)
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\d+)", r"\\sqrt{\1}", s)
    if s.startswith("{") and s.endswith("}") and _braced(s, 0) == (s[1:-1], len(s)):
        s = s[1:-1].strip()
    return s


def _as_fraction(s: str) -> Fraction | None:
    t = s.replace(" ", "")
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", t)
    if m:
        t = f"{m.group(1)}{m.group(2)}/{m.group(3)}"
    if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?(/[+-]?\d+)?", t):
        return None
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


# ---------------------------------------------------------------- latex -> sympy text
_FUNCS = {"sqrt", "pi", "log", "ln", "sin", "cos", "tan", "exp", "oo", "E", "I", "Abs", "cot", "sec", "csc",
          "asin", "acos", "atan"}


def _replace_command(s: str, name: str, n_args: int, build) -> str:
    out, i, key = [], 0, "\\" + name
    while True:
        j = s.find(key, i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j])
        k = j + len(key)
        args = []
        for _ in range(n_args):
            while k < len(s) and s[k] == " ":
                k += 1
            got = _braced(s, k)
            if got is None:
                if k < len(s):
                    args.append(s[k])
                    k += 1
                    continue
                return "".join(out) + s[j:]
            args.append(got[0])
            k = got[1]
        out.append(build(*args))
        i = k


def latex_to_expr_text(s: str) -> str:
    s = normalize(s)
    s = re.sub(r"\\sqrt\[([^\]]+)\]\{", r"\\nthroot{\1}{", s)
    for _ in range(4):  # nested commands
        s = _replace_command(s, "frac", 2, lambda a, b: f"(({a})/({b}))")
        s = _replace_command(s, "nthroot", 2, lambda n, a: f"(({a})**(1/({n})))")
        s = _replace_command(s, "sqrt", 1, lambda a: f"sqrt({a})")
    for src, dst in (("\\cdot", "*"), ("\\times", "*"), ("\\div", "/"), ("\\pi", "pi"), ("\\infty", "oo"),
                     ("\\ln", "log"), ("\\log", "log"), ("\\sin", "sin"), ("\\cos", "cos"), ("\\tan", "tan"),
                     ("\\exp", "exp"), ("^", "**"), ("{", "("), ("}", ")"), ("\\", "")):
        s = s.replace(src, dst)
    return s.strip()


def _safe(text: str) -> bool:
    if "__" in text or not re.fullmatch(r"[\w\s+\-*/().,]*", text):
        return False
    return all(len(w) == 1 or w in _FUNCS for w in re.findall(r"[A-Za-z_]\w*", text))


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _sympy_equal(a: str, b: str) -> bool:
    """Runs in the worker process."""
    import sympy
    from sympy.parsing.sympy_parser import (convert_xor, implicit_multiplication_application, parse_expr,
                                            standard_transformations)
    trans = standard_transformations + (implicit_multiplication_application, convert_xor)
    ea = parse_expr(a, transformations=trans, evaluate=True)
    eb = parse_expr(b, transformations=trans, evaluate=True)
    if isinstance(ea, tuple) or isinstance(eb, tuple):
        return False
    try:
        if sympy.simplify(ea - eb) == 0:
            return True
    except Exception:
        pass
    try:
        va, vb = complex(sympy.N(ea)), complex(sympy.N(eb))
        return abs(va - vb) <= 1e-6 * max(1.0, abs(vb))
    except Exception:
        return False


_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _reset_pool() -> None:
    global _pool
    with _pool_lock:
        if _pool is not None:
            for proc in list(getattr(_pool, "_processes", {}).values()):
                proc.kill()
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None


def sympy_equal(a: str, b: str, timeout_s: float = SYMPY_TIMEOUT_S) -> bool:
    """Symbolic equality in a worker process; a timeout or any error counts as 'not equal'."""
    if not (_safe(a) and _safe(b)):
        return False
    try:
        return bool(_get_pool().submit(_sympy_equal, a, b).result(timeout=timeout_s))
    except FutureTimeout:
        _reset_pool()
        return False
    except Exception:
        return False


def _scalar_equal(a: str, b: str, timeout_s: float) -> bool:
    na, nb = normalize(a), normalize(b)
    if na == nb:
        return True
    fa, fb = _as_fraction(na), _as_fraction(nb)
    if fa is not None and fb is not None:
        return fa == fb or abs(float(fa) - float(fb)) <= 1e-9 * max(1.0, abs(float(fb)))
    if not na or not nb:
        return False
    return sympy_equal(latex_to_expr_text(na), latex_to_expr_text(nb), timeout_s)


def answers_equivalent(candidate: str, reference: str, timeout_s: float = SYMPY_TIMEOUT_S) -> bool:
    """True when `candidate` and `reference` denote the same value (tuples/intervals element-wise)."""
    if candidate is None or not str(candidate).strip():
        return False
    ca, rb = normalize(candidate), normalize(reference)
    if ca == rb or ca.replace(" ", "") == rb.replace(" ", ""):
        return True
    pa, pb = _split_top(_strip_brackets(ca)), _split_top(_strip_brackets(rb))
    if len(pb) > 1 or len(pa) > 1:
        same_brackets = _brackets(ca) == _brackets(rb) or not _brackets(ca) or not _brackets(rb)
        return len(pa) == len(pb) and same_brackets and all(_scalar_equal(x, y, timeout_s) for x, y in zip(pa, pb))
    return _scalar_equal(ca, rb, timeout_s)


def _brackets(s: str) -> str:
    return (s[0] + s[-1]) if len(s) >= 2 and s[0] in "([{" and s[-1] in ")]}" else ""


def _strip_brackets(s: str) -> str:
    return s[1:-1] if _brackets(s) else s
