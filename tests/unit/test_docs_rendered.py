"""Figures are rendered, never typed: every `<!-- figures:NAME -->` region of README.md and docs/ is what
scripts/render_docs.py (`make docs`) renders from the committed metrics and benchmark files, so a rerun that
changes a metric fails here until `make docs` rewrites the text. And the pages speak to a user: no commit hash,
issue number, scratch path or word about how the project is worked on."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _renderer():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_docs = _renderer()


def test_every_rendered_region_is_the_committed_files():
    stale = render_docs.stale(render_docs.Sources())
    assert not stale, ("regions older than the files they are rendered from (run `make docs` and commit): "
                       + ", ".join(stale))


def test_readme_quotes_the_result_and_the_times_through_the_renderer():
    text = (ROOT / "README.md").read_text()
    for name in ("times", "results"):
        assert f"<!-- figures:{name} -->" in text and f"<!-- /figures:{name} -->" in text, name
    assert text.startswith("# trinity\n\n```bash\nmake run ") and "\nmake test " in text.split("```")[1]
    assert len(text.splitlines()) <= 150, "README is a product page: history and lab notes go to docs/benchmarks/"


def test_a_changed_metric_makes_the_readme_stale(tmp_path):
    """The mutation: one number of a copy of metrics/eval.json changed, the committed README no longer matches."""
    metrics = json.loads((ROOT / "metrics/eval.json").read_text())
    key = "test/recording/trinity" if "test/recording/trinity" in metrics else "test/all/trinity"
    metrics[key] = round(metrics[key] + 0.1, 4)
    copy = tmp_path / "eval.json"
    copy.write_text(json.dumps(metrics))
    stale = render_docs.stale(render_docs.Sources(replace={"metrics/eval.json": copy}))
    assert "README.md: figures:results" in stale


def _eval(p_random: float, d_random: float, p_best: float, d_best: float) -> dict:
    return {"test/recording/trinity": 0.5, "test/recording/x0_(=_random)": 0.5 - d_random,
            "test/recording/singlea": 0.5 - d_best, "test/recording/singleb": 0.1,
            "test/recording_items": 40,
            "test/recording_paired/x0_(=_random)/p_value": p_random,
            "test/recording_paired/x0_(=_random)/difference": d_random,
            "test/recording_paired/x0_(=_random)/n": 40,
            "test/recording_paired/singlea/p_value": p_best, "test/recording_paired/singlea/difference": d_best,
            "test/recording_paired/singlea/n": 40,
            "test/recording_paired/singleb/p_value": 0.001, "test/recording_paired/singleb/difference": 0.4,
            "test/recording_paired/singleb/n": 40}


@pytest.mark.parametrize("p_random,d_random,p_best,d_best,expected", [
    (0.001, 0.3, 0.4, -0.1, "**`trinity` beats random routing (0.500 against 0.200, p = 0.001, n = 40) and does not "
                            "beat its best single agent, `a` (0.500 against 0.600, p = 0.400, n = 40)**"),
    (0.3, 0.1, 0.01, -0.2, "**`trinity` does not beat random routing (0.500 against 0.400, p = 0.300, n = 40) and "
                           "loses to its best single agent, `a`"),
    (0.001, 0.3, 0.02, 0.1, "and beats every single agent (the best, `a`: 0.500 against 0.400, p = 0.020, n = 40)**"),
])
def test_the_verdict_is_computed_from_the_p_values_and_signs(tmp_path, p_random, d_random, p_best, d_best, expected):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(_eval(p_random, d_random, p_best, d_best)))
    text = render_docs.results(render_docs.Sources(replace={"metrics/eval.json": path}))
    assert expected in text.splitlines()[0], text.splitlines()[0]
    assert "on the recording's 40 test items, exact expected rewards" in text


def test_an_unknown_region_is_refused():
    with pytest.raises(KeyError, match="no renderer for region figures:nope"):
        render_docs.render("<!-- figures:nope -->\nx\n<!-- /figures:nope -->", render_docs.Sources())


# --- the pages speak to a user -----------------------------------------------------------------------------

HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# a checksum that says it is one: after its label on the same line, or in a table whose header names it
CHECKSUM_LABEL = re.compile(r"(?i)sha-?256|md5|checksum|model files|file hash")
LABELLED = re.compile(r"(?i)(?:sha-?256|md5|checksum|model files|file hash)[^;\n]*")
WORDS = {"an issue number": re.compile(r"(?i)\bissue [0-9]+"), "a scratch path": re.compile(r"/work/|/tmp/[\w.-]+/"),
         "a development session": re.compile(r"(?i)\bsessions?\b"),
         "the developers' point of view": re.compile(r"(?i)\bagainst us\b|recorder (?:runs|is running)")}


def user_pages() -> list[str]:
    tracked = subprocess.run(["git", "ls-files", "README.md", "docs", "data/recordings"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    pages = [p for p in tracked if p.endswith(".md") and (p == "README.md" or p.startswith("docs/")
                                                           or re.fullmatch(r"data/recordings/[^/]+/README\.md", p))]
    return sorted(set(pages))


def development_traces(text: str) -> list[str]:
    found = []
    header = None
    for no, line in enumerate(text.splitlines(), 1):
        header = (header or line) if line.lstrip().startswith("|") else None
        if not (header and CHECKSUM_LABEL.search(header)):
            found += [f"{no}: commit hash {h}" for h in HASH.findall(LABELLED.sub("", line))]
        found += [f"{no}: {what} ({m.group(0)!r})" for what, pattern in WORDS.items() for m in pattern.finditer(line)]
    return found


def test_the_hygiene_check_finds_what_it_looks_for():
    sample = ("measured at f54b0e2 by hand\nissue 40 asked\n/work/rec/trinity/cli.py\nthe twelfth session\n"
              "| setting | sha256 |\n|---|---|\n| pinned | 6a949abea424c146 |\nmodel files qwen (cc324af070c2)\n"
              "1000000 bytes\n")
    found = development_traces(sample)
    assert [f.split(":")[0] for f in found] == ["1", "2", "3", "4"], found


@pytest.mark.parametrize("page", user_pages())
def test_no_page_speaks_of_how_the_project_is_developed(page):
    found = development_traces((ROOT / page).read_text())
    assert not found, f"{page}:\n" + "\n".join(found)


def test_the_verifier_table_names_each_agents_check_and_moves_with_the_metrics(tmp_path):
    metrics = json.loads((ROOT / "metrics/eval.json").read_text())
    table = render_docs.verifiers(render_docs.Sources())
    assert "| `qwen-steps` (resolve) | humaneval |" in table and "| `qwen-direct` (reads) |" in table
    metrics["verifiers"]["qwen-steps"]["humaneval"]["accept_wrong"] = 0.5
    copy = tmp_path / "eval.json"
    copy.write_text(json.dumps(metrics))
    assert "docs/benchmarks/README.md: figures:verifiers" in render_docs.stale(
        render_docs.Sources(replace={"metrics/eval.json": copy}))
    copy.write_text(json.dumps({k: v for k, v in metrics.items() if k != "verifiers"}))
    assert render_docs.verifiers(render_docs.Sources(replace={"metrics/eval.json": copy})).startswith("No run's")


def test_the_results_say_whether_a_win_can_show_on_the_items_from_the_reach_metrics(tmp_path):
    ev = _eval(0.001, 0.3, 0.4, -0.1)
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(ev))
    assert "Can a win" not in render_docs.results(render_docs.Sources(replace={"metrics/eval.json": path}))
    ev |= {"test/reach/hindsight/difference": 0.3, "test/reach/hindsight/p_value": 0.0001,
           "test/reach/best_per-suite_policy_(hindsight)/difference": 0.0933,
           "test/reach/best_per-suite_policy_(hindsight)/p_value": 0.0654}
    path.write_text(json.dumps(ev))
    line = render_docs.results(render_docs.Sources(replace={"metrics/eval.json": path})).splitlines()[0]
    assert " Can a win over the best single agent show on these items at all? " in line
    assert "knowing every reply in advance +0.300 (p = 0.0001)" in line
    assert "tells only the suites apart can reach) +0.093 (p = 0.065)" in line
    assert "prompt-independent" not in line        # no key, no clause
    ev["test/reach/hindsight/p_value"] = 0.0         # rounded to 0 in the metrics file
    path.write_text(json.dumps(ev))
    assert "advance +0.300 (p < 1e-06)" in render_docs.results(render_docs.Sources(replace={"metrics/eval.json": path}))


def test_benchmark_pages_render_their_own_regions_and_one_name_has_one_renderer(tmp_path):
    (tmp_path / "one.py").write_text('REGIONS = {"shared": lambda src: "one\\n"}\n')
    assert render_docs.page_regions(tmp_path)["shared"](None) == "one\n"
    (tmp_path / "two.py").write_text('REGIONS = {"shared": lambda src: "two\\n"}\n')
    with pytest.raises(ValueError, match=r"figures:shared is rendered by two modules .*\(one.py and two.py\)"):
        render_docs.page_regions(tmp_path)
    # every benchmark page is a page the check reads
    assert ROOT / "docs/benchmarks/ablate_speed/README.md" in render_docs.pages()


def test_a_benchmark_page_moves_with_its_result_file(tmp_path):
    rel = "docs/benchmarks/ablate_speed/workers.json"
    res = json.loads((ROOT / rel).read_text())
    res["stage"]["wall_ratio_best"], res["stage"]["identical_outputs"] = 9.87, False
    changed = tmp_path / "workers.json"
    changed.write_text(json.dumps(res))
    text = render_docs.REGIONS["ablate-speed-workers"](render_docs.Sources(replace={rel: changed}))
    assert "Wall ratio 9.87x" in text and "did **not** write the same files" in text
    assert "docs/benchmarks/ablate_speed/README.md: figures:ablate-speed-workers" in render_docs.stale(
        render_docs.Sources(replace={rel: changed}))


@pytest.mark.parametrize("page", sorted(ROOT.glob("docs/benchmarks/*/README.md")), ids=lambda p: p.parent.name)
def test_a_benchmark_page_types_no_table_of_measured_figures(page):
    """A benchmark page's tables of figures are rendered regions (scripts/figures/<page>.py), not typed rows."""
    text = re.sub(r"```.*?```", "", render_docs.REGION.sub("", page.read_text()), flags=re.S)
    typed = [line for line in text.splitlines()
             if line.startswith("|") and re.search(r"\d\.\d|\d ?(?:s|ms|%)(?:\W|$)", line)]
    assert not typed, f"{page.relative_to(ROOT)}: typed figures in a table, render them from their file: {typed[:3]}"
