"""Math answers: extract the final answer from a reply and decide equivalence with the reference.

Extraction is ours (the protocol's "The answer is 7. <idea>...</idea>" replies, '####', the last number).
Equivalence: normalised string equality, then exact rational comparison of plain numbers, then
math-verify (LaTeX parsed to sympy: intervals, sets, tuples, roots, pi, percentages) in a worker
process under a time limit. math-verify parses with ANTLR, never with eval.
"""

from __future__ import annotations

import os
import re
import threading
from fractions import Fraction

from trinity.tasks.graders.worker_pool import WorkerError, WorkerPool, WorkerTimeout

VERIFY_TIMEOUT_S = 5.0


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
    hashes: list[str] = re.findall(r"####\s*([^\n]+)", reply)
    if hashes:
        return hashes[-1].strip()
    stated: list[str] = re.findall(r"answer\s+is\s*:?\s*([^\n]+)", reply, flags=re.IGNORECASE) or \
        re.findall(r"answer\s*:\s*([^\n]+)", reply, flags=re.IGNORECASE)
    if stated:
        answer = stated[-1].strip()
        if "$" in answer and answer.count("$") >= 2 and not re.match(r"^\$?\d", answer.replace("\\$", "")):
            inner: list[str] = re.findall(r"\$([^$]+)\$", answer)
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
    # a short exponent only: Fraction('1e999999999') would build that integer here, outside any time limit
    if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d{1,3})?(/[+-]?\d+)?", t):
        return None
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


# ---------------------------------------------------------------- equivalence
def _as_latex(s: str) -> str:
    """Plain-text spellings that math-verify's LaTeX parser would misread ('pi' as p*i)."""
    s = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi", s)
    # math-verify reads i as the imaginary unit only where it stands alone ('2 i', not '2i'), and
    # decides that per side: '1 + 2i' against '2 i + 1' would compare a symbol with the unit
    return re.sub(r"(?<=[\d})])i(?![A-Za-z])", " i", s)


def _verify(candidate: str, reference: str, step_timeout_s: int) -> bool:
    """Runs in a worker process on its main thread, where math-verify's signal-based timeouts work."""
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig()]
    # no string fallback: an answer math-verify cannot parse was already compared as text by the caller
    gold = parse(f"${reference}$", config, fallback_mode="no_fallback", parsing_timeout=step_timeout_s)
    pred = parse(f"${candidate}$", config, fallback_mode="no_fallback", parsing_timeout=step_timeout_s)
    return bool(gold and pred and verify(gold, pred, timeout_seconds=step_timeout_s))


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def _get_pool() -> WorkerPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = WorkerPool(min(4, os.cpu_count() or 1), warm_imports=("math_verify", __name__))
        return _pool


def verify_equal(candidate: str, reference: str, timeout_s: float = VERIFY_TIMEOUT_S) -> bool:
    """math-verify's verdict, in a worker process; a timeout or an error on this input counts as 'not
    equal', but a worker that cannot start raises: every verdict would silently be 'wrong'.

    math-verify's own per-step alarms stop most slow cases without losing the worker; they are set
    a second under our limit, which also stops what a signal cannot interrupt (a huge integer power
    computed in C) by killing the worker."""
    step_timeout_s = max(1, int(timeout_s) - 1)
    try:
        return bool(_get_pool().call(_verify, _as_latex(candidate), _as_latex(reference), step_timeout_s,
                                     timeout_s=timeout_s))
    except (WorkerTimeout, WorkerError):
        return False


def answers_equivalent(candidate: str, reference: str, timeout_s: float = VERIFY_TIMEOUT_S) -> bool:
    """True when `candidate` and `reference` denote the same value (sets, intervals, tuples included)."""
    if candidate is None or not str(candidate).strip():
        return False
    ca, rb = normalize(candidate), normalize(reference)
    if ca.replace(" ", "") == rb.replace(" ", ""):
        return True
    fa, fb = _as_fraction(ca), _as_fraction(rb)
    if fa is not None and fb is not None:   # plain numbers: exact, and no worker round trip
        # in fractions, not floats: float(10**400) overflows
        scale: Fraction | int = abs(fb) if abs(fb) > 1 else 1   # max(1, |fb|), typed
        return abs(fa - fb) <= scale / 10**9
    if not ca or not rb:
        return False
    return verify_equal(ca, rb, timeout_s)
