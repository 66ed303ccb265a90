"""The figures the benchmark pages quote are the committed files' figures: each claim below
names the sentence it is in (a pattern with one number) and the committed file and key it must equal, at
the precision it is quoted. A rerun that changes a metric without the text (or a text edited without a
rerun) fails here, naming both numbers."""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _json(path: str) -> Any:
    return json.loads((ROOT / path).read_text())


def _agent_accuracy(agent: str | None) -> Callable[[], float]:
    """Accuracy of one agent over every item of docs/benchmarks/agent_suites/results.json, or (None) the
    share of items some agent answers right."""
    def read() -> float:
        grades: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for row in _json("docs/benchmarks/agent_suites/results.json")["rows"]:
            grades[row["item"]][row["agent"]] = float(row["grade"])
        if agent is None:
            return sum(max(g.values()) for g in grades.values()) / len(grades)
        return sum(g[agent] for g in grades.values()) / len(grades)
    return read


def _state_row(label: str, key: str) -> Callable[[], Any]:
    def read() -> Any:
        rows = [json.loads(line)
                for line in (ROOT / "docs/benchmarks/state_determinism/results.jsonl").read_text().splitlines()]
        return next(r for r in rows if r["label"] == label)[key]
    return read


def _ablate_speed(*keys: str, pick: Callable[[list], Any] = min, file: str = "results.json") -> Callable[[], Any]:
    """A figure of docs/benchmarks/ablate_speed/<file>: the value at `keys`, a list reduced by `pick`."""
    def read() -> Any:
        value = _json(f"docs/benchmarks/ablate_speed/{file}")
        for key in keys:
            value = value[key]
        return pick(value) if isinstance(value, list) else value

    return read


# README's figures of the default run are rendered from the metrics (scripts/render_docs.py, checked by
# tests/unit/test_docs_rendered.py); these are the benchmark pages' figures, quoted in prose beside their files.
# (document, pattern with one group: the quoted number, reader of the committed figure)
CLAIMS: list[tuple[str, str, Callable[[], Any]]] = [
    ("docs/benchmarks/agent_suites/README.md", r"\| all \| 30 \| (\d\.\d\d) ", _agent_accuracy("qwen-direct")),
    ("docs/benchmarks/agent_suites/README.md", r"\| all \| 30 \| [^|]+\| (\d\.\d\d) ", _agent_accuracy("qwen-steps")),
    ("docs/benchmarks/agent_suites/README.md", r"\| all \| 30 \| [^|]+\|[^|]+\| (\d\.\d\d) ",
     _agent_accuracy("qwen-python")),
    ("docs/benchmarks/agent_suites/README.md", r"\| all \| 30 \|(?:[^|]+\|){4} (\d\.\d\d) \|", _agent_accuracy(None)),
    ("docs/benchmarks/state_determinism/README.md", r"library's own choice[^|]*\| ([0-9a-f]{16}) \|",
     _state_row("this CPU, library default", "sha256")),
    ("docs/benchmarks/state_determinism/README.md", r"trinity's default[^|]*\| ([0-9a-f]{16}) \|",
     _state_row("trinity pinned (this CPU)", "sha256")),
    ("docs/benchmarks/state_determinism/README.md", r"library's own choice[^|]*\|[^|]+\|[^|]+\| (\d\.\de-\d+) \|",
     _state_row("this CPU, library default", "max_abs_diff_to_avx2_cpu")),
    ("docs/benchmarks/ablate_speed/README.md", r"\(592 states\) \| (\d+\.\d) ms",
     _ablate_speed("per_call", "generation", "walk_ms")),
    ("docs/benchmarks/ablate_speed/README.md", r"\(592 states\) \| [^|]+\| (\d+\.\d) ms",
     _ablate_speed("per_call", "generation", "vectorised_ms")),
    ("docs/benchmarks/ablate_speed/README.md", r"\(602 states\) \| (\d+\.\d) ms",
     _ablate_speed("per_call", "validation", "walk_ms")),
    ("docs/benchmarks/ablate_speed/README.md", r"CPU of its process, best of 2 \| (\d+\.\d) s",
     _ablate_speed("stage", "runs", "before", pick=lambda runs: min(r["cpu_s"] for r in runs))),
    ("docs/benchmarks/ablate_speed/README.md", r"CPU of its process, best of 2 \| [^|]+\| (\d+\.\d) s",
     _ablate_speed("stage", "runs", "after", pick=lambda runs: min(r["cpu_s"] for r in runs))),
    ("docs/benchmarks/ablate_speed/README.md", r"best of 2 \| [^|]+\| [^|]+\| (\d\.\d\d)x",
     _ablate_speed("stage", "cpu_ratio_best")),
    *[("docs/benchmarks/ablate_speed/README.md", pattern,
       _ablate_speed("stage", "runs", label, pick=lambda runs, k=key: runs[0][k], file="timeouts.json"))
      for label, column in (("before", ""), ("after", r"[^|]+\| "))
      for key, pattern in (("wall_s", rf"\| wall \| {column}(\d+\.\d) s"),
                           ("sandbox_runs", rf"\| sandbox runs \(of them timeouts\) \| {column}(\d+) "),
                           ("sandbox_timeouts", rf"\| sandbox runs \(of them timeouts\) \| {column}\d+ \((\d+)\)"),
                           ("cpu_s", rf"sandboxed programs not included\) \| {column}(\d+\.\d) s"))],
    ("docs/benchmarks/ablate_speed/README.md", r"Wall ratio (\d\.\d\d)x",
     _ablate_speed("stage", "wall_ratio_best", file="timeouts.json")),
]


def _as_quoted(quoted: str, actual: Any) -> Any:
    """The committed figure at the quoted precision (decimals, or scientific with its mantissa digits)."""
    if isinstance(actual, str):
        return actual[: len(quoted)]
    if "e" in quoted:
        digits = len(quoted.split("e")[0].split(".")[1])
        return f"{float(actual):.{digits}e}".replace("e-0", "e-")
    if "." not in quoted:
        return str(round(float(actual)))
    return f"{float(actual):.{len(quoted.split('.')[1])}f}"


@pytest.mark.parametrize("doc,pattern,read", CLAIMS, ids=[f"{d}:{p[:40]}" for d, p, _ in CLAIMS])
def test_quoted_figure_is_the_committed_one(doc, pattern, read):
    text = re.sub(r"\s+", " ", (ROOT / doc).read_text())
    found = re.search(re.sub(r"\\s\+", " ", pattern), text)
    assert found, f"{doc}: no sentence matches {pattern!r} (reworded? update the claim here)"
    quoted = found.group(1)
    actual = read()
    assert quoted == _as_quoted(quoted, actual) or _rounds_from(quoted, actual), \
        f"{doc} quotes {quoted}; the committed file says {actual}"


def _rounds_from(quoted: str, actual: Any) -> bool:
    """A committed metric rounded to k decimals (0.8085) stands for any value within half a unit of its last
    digit (0.80845 to 0.80855); a figure quoted from the unrounded value (the report's 0.809 of 38/47 =
    0.80851) is consistent when some value of that interval rounds to it."""
    if isinstance(actual, str) or "e" in quoted or "." not in quoted:
        return False
    text = repr(float(actual))
    if "e" in text or "." not in text:
        return False
    half = 0.5 * 10 ** -len(text.split(".")[1])
    ends = [float(_as_quoted(quoted, float(actual) + d)) for d in (-half * 0.999, half * 0.999)]
    return ends[0] <= float(quoted) <= ends[1]


def test_every_picture_a_committed_page_shows_is_committed():
    """A Markdown page in git links only pictures that are in git too (a copied report keeps its charts)."""
    import subprocess

    pages = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    missing = []
    for page in pages:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", (ROOT / page).read_text()):
            if "://" in target:
                continue
            path = (ROOT / page).parent / target
            rel = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else target
            if rel not in tracked:
                missing.append(f"{page} -> {target}")
    assert not missing, "pictures linked but not committed:\n" + "\n".join(missing)
