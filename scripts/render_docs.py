"""The figures README.md and docs/ quote, rendered from the files runs write: every region of a page between
`<!-- figures:NAME -->` and `<!-- /figures:NAME -->` is the output of `REGIONS[NAME]` on the committed metrics
(metrics/eval.json, metrics/evolve.json, metrics/ablations.json, params.yaml) and benchmark result files
(docs/benchmarks/*/results.json). Nothing in a region is typed: the verdict's words come from the p-values and
signs, the time figures from a benchmark's output file that names its CPU. A page's own regions are rendered by
its module in scripts/figures/ (`<page>.py` for a page of docs/benchmarks/, `doc_<page>.py` for one of docs/; each
with its `REGIONS`), found here by name.

    .venv/bin/python scripts/render_docs.py           # or: make docs (rewrite the regions in place)
    .venv/bin/python scripts/render_docs.py --check   # exit 1, naming each region older than its files

tests/unit/test_docs_rendered.py runs the check, so a rerun that changes a metric without `make docs` (or a
region edited by hand) fails there.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md", "docs/benchmarks/README.md", "docs/benchmarks/*/README.md")
PAGE_RENDERERS = Path(__file__).resolve().parent / "figures"
REGION = re.compile(r"(?P<open><!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- /figures:(?P=name) -->)",
                    re.S)
ALPHA = 0.05                       # trinity.stats.ALPHA, the report's significance level
EVAL, EVOLVE, ABLATIONS, PARAMS = "metrics/eval.json", "metrics/evolve.json", "metrics/ablations.json", "params.yaml"
TIMES = "docs/benchmarks/command_times/results.json"
FEATURE_PATHS = "docs/benchmarks/feature_paths/results.json"
FEATURE_PATHS_BUSY = "docs/benchmarks/feature_paths/busy.json"
FEATURE_PATHS_AVX2 = "docs/benchmarks/feature_paths/avx2.json"


class Sources:
    """The files regions are rendered from, under `root`; `replace` reads another file in one's place (a test
    renders from a changed copy of metrics/eval.json this way)."""

    def __init__(self, root: Path = ROOT, replace: Mapping[str, Path] | None = None):
        self.root = Path(root)
        self.replace = dict(replace or {})

    def path(self, rel: str) -> Path:
        return Path(self.replace.get(rel, self.root / rel))

    def json(self, rel: str) -> Any:
        path = self.path(rel)
        return json.loads(path.read_text()) if path.is_file() else {}

    def yaml(self, rel: str) -> Any:
        path = self.path(rel)
        return yaml.safe_load(path.read_text()) if path.is_file() else {}

    @staticmethod
    def table_rows(text: str) -> list[dict[str, str]]:
        """The first markdown table of `text` (a benchmark's .md or .txt output), one dict per row keyed by its
        header's cells; [] when it has none."""
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("|")), len(lines))
        table = []
        for line in lines[start:]:
            if not line.startswith("|"):
                break
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        return [dict(zip(table[0], row, strict=True)) for row in table[2:]]


# --- formatting -------------------------------------------------------------------------------------------

def p_text(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def p_clause(p: float) -> str:
    """`p = 0.065`, or `p < 1e-06` for a p-value the metrics file rounded to 0 (it keeps 6 decimals)."""
    return "p < 1e-06" if p == 0 else f"p = {p_text(p)}"


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def word(difference: float, p: float) -> str:
    """`trinity` against another method, as the report decides it: a win or a loss only at p < ALPHA."""
    if p < ALPHA:
        return "beats" if difference > 0 else "loses to"
    return "does not beat"


def outcome(difference: float, p: float) -> str:
    return {"beats": "win", "loses to": "loss"}.get(word(difference, p), "no significant difference")


# --- the default run's result (README) ----------------------------------------------------------------------

def _comparisons(ev: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """One row per method of the default run's test set, with its exact (recording) and sampled figures and
    the paired test the verdict rests on (exact when metrics/eval.json holds it, else sampled)."""
    exact = any(k.startswith("test/recording_paired/") for k in ev)

    def row(label: str, rec: str | None, sampled: str | None, compared: bool = True) -> dict[str, Any]:
        r: dict[str, Any] = {"label": label, "exact": ev.get(f"test/recording/{rec}") if rec else None,
                             "sampled": ev.get(f"test/all/{sampled}") if sampled else None, "compared": compared}
        if rec:
            r["low"] = ev.get(f"test/recording_interval/{rec}/low")
            r["high"] = ev.get(f"test/recording_interval/{rec}/high")
            r["p_exact"] = ev.get(f"test/recording_paired/{rec}/p_value")
            r["d_exact"] = ev.get(f"test/recording_paired/{rec}/difference")
            r["n"] = ev.get(f"test/recording_paired/{rec}/n")
        if sampled:
            r["p_sampled"] = ev.get(f"test/paired/{sampled}/p_value")
            r["d_sampled"] = ev.get(f"test/paired/{sampled}/difference")
        r["p"], r["d"] = (r.get("p_exact"), r.get("d_exact")) if exact else (r.get("p_sampled"), r.get("d_sampled"))
        return r

    singles = sorted({k.removeprefix("test/all/single:") for k in ev if k.startswith("test/all/single:")}
                     | {k.removeprefix("test/recording/single") for k in ev
                        if k.startswith("test/recording/single") and "/" not in k.removeprefix("test/recording/")})
    rows = [row("`trinity`", "trinity", "trinity", compared=False)]
    rows += [row(f"`single:{s}` alone", f"single{s}", f"single:{s}") for s in singles]
    rows.append(row("random routing (x0, the untrained start)", "x0_(=_random)", "random"))
    if "test/recording/fixed_policy_(chosen_on_train+validation)" in ev:
        rows.append(row("the fixed policy chosen on train + validation", "fixed_policy_(chosen_on_train+validation)",
                        None))
    if "test/recording/bound_hindsight" in ev:
        rows.append(row("bound: every reply known in advance", "bound_hindsight", None, compared=False))
    rows = [r for r in rows if r["exact"] is not None or r["sampled"] is not None]
    return rows, ("exact" if exact else "sampled")


def verdict_sentence(rows: list[dict[str, Any]], basis: str, items: int | None) -> str:
    def value(r: Mapping[str, Any]) -> float:
        return r["exact"] if basis == "exact" else r["sampled"]

    def test(r: Mapping[str, Any]) -> str:
        n = f", n = {r['n']}" if basis == "exact" and r.get("n") is not None else ""
        return f"{value(mine):.3f} against {value(r):.3f}, p = {p_text(r['p'])}{n}"

    mine = rows[0]
    singles = [r for r in rows if r["label"].startswith("`single:") and r.get("p") is not None]
    random = next((r for r in rows if r["label"].startswith("random routing") and r.get("p") is not None), None)
    parts = []
    if random is not None:
        parts.append(f"{word(random['d'], random['p'])} random routing ({test(random)})")
    if singles:
        words = [word(r["d"], r["p"]) for r in singles]
        best = max(singles, key=value)
        name = best["label"].split("`")[1].removeprefix("single:")
        if all(w == "beats" for w in words):
            parts.append(f"beats every single agent (the best, `{name}`: {test(best)})")
        else:
            parts.append(f"{word(best['d'], best['p'])} its best single agent, `{name}` ({test(best)})")
    on = (f"on the recording's {items} test items, exact expected rewards" if basis == "exact" and items
          else "on the test items, sampled episodes")
    return (f"**`trinity` {' and '.join(parts)}** ({on}; a paired test at p < {ALPHA} decides a win or a "
            "loss).")


REACH = (("hindsight", "knowing every reply in advance"),
         ("best_per-suite_policy_(hindsight)", "the best per-suite policy, chosen on these test items (the most a "
                                               "coordinator that tells only the suites apart can reach)"),
         ("best_prompt-independent_policy_(hindsight)", "the best prompt-independent policy, chosen likewise"))


def reach_sentence(ev: Mapping[str, Any]) -> str | None:
    """Whether a win over the best single agent can show on the test items at all (the report's bounds, paired
    against it): None when the run wrote no such keys."""
    parts = []
    for key, words in REACH:
        d, p = ev.get(f"test/reach/{key}/difference"), ev.get(f"test/reach/{key}/p_value")
        if d is not None and p is not None:
            parts.append(f"{words} {d:+.3f} ({p_clause(p)})")
    if not parts:
        return None
    return ("Can a win over the best single agent show on these items at all? The recording's bounds, paired "
            "against it on the same items: " + "; ".join(parts) + ".")


def results(src: Sources) -> str:
    ev = src.json(EVAL)
    params = src.yaml(PARAMS)
    rows, basis = _comparisons(ev)
    if not rows or rows[0]["label"] != "`trinity`":
        return "No run's metrics are committed yet (`make run`, then `make docs`).\n"
    items = ev.get("test/recording_items")
    repeats = (params.get("eval") or {}).get("repeats")
    tasks = params.get("tasks") or {}
    suites = ", ".join([*(tasks.get("train") or []), *(f"{s} (zero-shot)" for s in tasks.get("transfer") or [])])
    replay = ((params.get("pool") or {}).get("replay") or {}).get("recording")
    reach = reach_sentence(ev)
    lines = [verdict_sentence(rows, basis, items) + (f" {reach}" if reach else ""), ""]
    has_exact = any(r["exact"] is not None for r in rows)
    head = ["method"]
    if has_exact:
        head += ["exact expected reward [95 % interval]", "exact: paired p (n items)"]
    head += [f"sampled reward ({repeats} runs per item)" if repeats else "sampled reward", "sampled: paired p",
             f"`trinity` against it ({basis})"]
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    for r in rows:
        cells = [r["label"]]
        if has_exact:
            interval = f" [{r['low']:.3f}, {r['high']:.3f}]" if r.get("low") is not None else ""
            cells.append("" if r["exact"] is None else f"{r['exact']:.3f}{interval}")
            n = f" ({r['n']})" if r.get("n") is not None else ""
            cells.append(f"{p_text(r['p_exact'])}{n}" if r.get("p_exact") is not None else "")
        cells.append("" if r["sampled"] is None else f"{r['sampled']:.3f}")
        cells.append(p_text(r["p_sampled"]) if r.get("p_sampled") is not None else "")
        cells.append(outcome(r["d"], r["p"]) if r["compared"] and r.get("p") is not None else "")
        lines.append("| " + " | ".join(cells) + " |")
    where = f" replayed from `{replay}`" if replay else ""
    lines += ["", f"The default run's test items{where} ({suites}), from the committed `metrics/eval.json`. "
              "*Exact*: each item's expected reward, every path of the recording weighted by its probability under "
              "the method's routing; its interval is over the items, and its p-value the report's paired test over "
              "the same items (n = items, never items x episodes). *Sampled*: the mean reward of the episodes as run, "
              "with the paired test over items and runs."]
    return "\n".join(lines) + "\n"


# --- how long the two commands take -----------------------------------------------------------------------------

def _latest_times(src: Sources) -> list[dict[str, Any]]:
    """The latest successful run of each command on each CPU it was timed on (runs are appended in the order they
    ran): a user reads the time on a CPU like theirs, with AMX or AVX-512 or neither (one model name, an AMD EPYC,
    covers CPUs with and without AVX-512)."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in src.json(TIMES).get("runs", []):
        if r.get("exit") == 0:
            key = (r["command"], r["cpu"], r.get("vector_units") or "")
            latest.pop(key, None)   # re-inserted: the CPU timed last comes last
            latest[key] = r
    # a CPU timed before its vector units were recorded: its later rows that record them stand for it
    known = {(command, cpu) for command, cpu, units in latest if units}
    return [r for c in ("make run", "make test") for (command, cpu, units), r in latest.items()
            if command == c and (units or (command, cpu) not in known)]


def _cpu_words(r: dict[str, Any]) -> str:
    """`Intel Xeon with AMX`, `AMD EPYC with AVX2 only (no AVX-512, no AMX)`, ...: what the row's CPU computes with."""
    units = r.get("vector_units")
    if "AMX" in r["cpu"]:
        return r["cpu"]
    if units == "AMX":
        return f"{r['cpu']} with AMX"
    no_amx = {True: " with AMX", False: " without AMX"}.get(r.get("amx"), "")
    if units == "AVX2 only":
        return f"{r['cpu']} with AVX2 only (no AVX-512, no AMX)"
    if units:
        return f"{r['cpu']} with {units}{', no AMX' if r.get('amx') is False else ''}"
    return f"{r['cpu']}{no_amx}"


def times(src: Sources) -> str:
    rows = _latest_times(src)
    if not rows:
        return "Not timed yet (`python benchmarks/command_times.py --run make-run`).\n"
    lines = []
    for command in dict.fromkeys(r["command"] for r in rows):
        parts = []
        for r in (r for r in rows if r["command"] == command):
            summary = f", {r['summary']}" if r.get("summary") else ""
            parts.append(f"**{duration(r['wall_s'])}** on a {r['cores']}-core {_cpu_words(r)}, no GPU ({r['where']}"
                         f"{summary}; {r['date']})")
        lines.append(f"- `{command}`: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def command_times(src: Sources) -> str:
    runs = src.json(TIMES).get("runs", [])
    lines = ["| date | command | wall time | exit | outcome | CPU | where | note |",
             "|---|---|---:|---:|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['date']} | `{r['command']}` | {duration(r['wall_s'])} | {r['exit']} "
                     f"| {r.get('summary') or ''} | {r['cores']}-core {_cpu_words(r)} | {r['where']} "
                     f"| {r.get('note') or ''} |")
    return "\n".join(lines) + "\n"


# --- the default run in detail (docs/benchmarks/README.md) ------------------------------------------------------

def default_run(src: Sources) -> str:
    ev, evolve, ablations = src.json(EVAL), src.json(EVOLVE), src.json(ABLATIONS)
    lines = []
    fit = evolve.get("kept_mean_fit") or {}
    if fit and "test/recording/trinity" in ev:
        lines.append(f"The kept mean (generation {fit.get('generation')}, chosen on validation by "
                     f"`{evolve.get('validation_select')}`): exact expected reward {fit['train']:.3f} on its "
                     f"{fit.get('train_items')} training items, {fit['validation']:.3f} on the "
                     f"{fit.get('validation_items')} validation items that chose it, "
                     f"{ev['test/recording/trinity']:.3f} on the test items.")
        lines.append("")
    variants = (ablations.get("variants") or {}) if ablations.get("enabled") else {}
    names = sorted({k.removeprefix("test/all/ablation:") for k in ev if k.startswith("test/all/ablation:")})
    if names:
        lines += ["The paper's ablations, each trained as `trinity` is but for its change "
                  "(`metrics/ablations.json`), on the same test items (sampled episodes):", "",
                  "| variant | best validation reward | test reward | variant - `trinity` | p |",
                  "|---|---:|---:|---:|---:|"]
        if "test/all/trinity" in ev:
            lines.append(f"| `trinity` | {evolve.get('best_validation_reward', float('nan')):.3f} | "
                         f"{ev['test/all/trinity']:.3f} | | |")
        for name in names:
            v = variants.get(name) or {}
            val = v.get("best_validation_reward")
            d = ev.get(f"test/paired/ablation:{name}/difference")
            p = ev.get(f"test/paired/ablation:{name}/p_value")
            lines.append(f"| `{name}` | {'' if val is None else f'{val:.3f}'} | {ev[f'test/all/ablation:{name}']:.3f} "
                         f"| {'' if d is None else f'{-d:+.3f}'} | {'' if p is None else p_text(p)} |")
    return ("\n".join(lines) + "\n") if lines else "No run's metrics are committed yet.\n"


def verifiers(src: Sources) -> str:
    """The default run's verifier table: per agent and suite, how often its Verifier accepts right and wrong
    answers of the recording (metrics/eval.json `verifiers`), with each share's n."""
    table = src.json(EVAL).get("verifiers") or {}
    if not table:
        return "No run's verifier table is committed yet.\n"
    setups = (src.yaml("params.yaml").get("pool") or {}).get("models") or {}
    lines = ["| agent (its check) | suite | accepts right answers | accepts wrong answers |", "|---|---|---:|---:|"]
    for agent in sorted(table):
        check = ((setups.get(agent) or {}).get("setup") or {}).get("verify") or "reads"
        for suite in sorted(table[agent], key=lambda s: (s == "all", s)):
            row = table[agent][suite]
            lines.append(f"| `{agent}` ({check}) | {suite} | {100 * row['accept_right']:.0f}% of {row['n_right']} | "
                         f"{100 * row['accept_wrong']:.0f}% of {row['n_wrong']} |")
    return "\n".join(lines) + "\n"


def feature_paths(src: Sources, file: str = FEATURE_PATHS) -> str:
    """benchmarks/feature_paths.py's table: the coordinator's features every way they run on the CPU it measured."""
    if not src.path(file).is_file():
        return "Not measured yet (`python benchmarks/feature_paths.py --out " + file + "`).\n"
    res = src.json(file)
    rows = res["ways"]
    base = rows[0]
    busy = f", with {res['busy']} other processes spinning throughout" if res.get("busy") else ", nothing else running"
    lines = [f"Measured on a {res['cores']}-core {res['cpu']} ({', '.join(res['flags'])}), {res.get('date', '')}"
             f"{busy}: {res['requests']} one-line requests and {res['states']} prepared prompts per way, the median of "
             f"{res['rounds']} round{'' if res['rounds'] == 1 else 's'}.", "",
             "| way | `/v1/route` p50 (ms) | computed tokens | arithmetic floor (ms) | peak GFLOP/s | states/s | "
             "states/s vs the stages' default | rel. error | routes kept |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['way']} | {r['route_ms']:.1f} | {r['tokens']:.0f} | {r['floor_ms']:.1f} | "
                     f"{r['peak_gflops']:.0f} | {r['states_s']:.2f} | {r['states_s'] / base['states_s']:.2f} | "
                     f"{r['rel_error']:.1e} | {_share(r.get('routes_kept'))} |")
    return "\n".join(lines) + "\n"


def _share(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.0f}%"


def page_regions(folder: Path = PAGE_RENDERERS) -> dict[str, Callable[[Sources], str]]:
    """The regions of the benchmark pages: every scripts/figures/<page>.py's `REGIONS`, loaded by path (this script
    runs as a file, not from a package). Two modules naming one region is an error, not a silent override."""
    found: dict[str, Callable[[Sources], str]] = {}
    owner: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"trinity_docs_figures_{path.stem}", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, fn in module.REGIONS.items():
            if name in found:
                raise ValueError(f"figures:{name} is rendered by two modules of {folder} ({owner[name]} and "
                                 f"{path.name})")
            found[name], owner[name] = fn, path.name
    return found


def _all_regions() -> dict[str, Callable[[Sources], str]]:
    regions: dict[str, Callable[[Sources], str]] = {
        "results": results, "times": times, "command-times": command_times, "default-run": default_run,
        "verifiers": verifiers,
        "feature-paths": feature_paths, "feature-paths-busy": lambda src: feature_paths(src, FEATURE_PATHS_BUSY),
        "feature-paths-avx2": lambda src: feature_paths(src, FEATURE_PATHS_AVX2),
    }
    for name, fn in page_regions().items():
        if name in regions:
            raise ValueError(f"figures:{name} is rendered here and by scripts/figures/")
        regions[name] = fn
    return regions


REGIONS: dict[str, Callable[[Sources], str]] = _all_regions()


# --- pages --------------------------------------------------------------------------------------------------

def pages(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for pattern in PAGES:
        found += [Path(p) for p in sorted(glob.glob(str(root / pattern)))]
    return found


def render(text: str, src: Sources) -> str:
    """`text` with every marked region's body rendered afresh; an unknown region name raises."""
    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in REGIONS:
            raise KeyError(f"no renderer for region figures:{name} (known: {', '.join(REGIONS)})")
        return m["open"] + REGIONS[name](src) + m["close"]

    return REGION.sub(one, text)


def stale(src: Sources, root: Path = ROOT) -> list[str]:
    """`page: figures:NAME` for every region whose committed text differs from a fresh render."""
    out = []
    for page in pages(root):
        text = page.read_text()
        for m in REGION.finditer(text):
            if m["body"] != REGIONS[m["name"]](src):
                out.append(f"{page.relative_to(root)}: figures:{m['name']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming every stale region")
    args = ap.parse_args(argv)
    src = Sources()
    if args.check:
        old = stale(src)
        for where in old:
            print(f"stale: {where} (make docs rewrites it)")
        return 1 if old else 0
    for page in pages():
        text = page.read_text()
        new = render(text, src)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
