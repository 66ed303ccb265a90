"""DVC as its users expect: metrics and plot data are `cache: false` outputs committed to git, as in DVC's
example project, so `dvc metrics diff`, `dvc plots diff`, `dvc params diff` and `dvc exp show` compare runs.

The first test checks the project itself: git tracks every `cache: false` output of dvc.yaml and ignores every
cached one. The second runs real git and DVC in a temporary repository that carries the project's own
`.gitignore`, `.dvc/config` (Hydra composition on), metric and plot declarations and top-level `plots:`; only
the stage commands are swapped for one stage of a few lines of Python that writes those files from `params.yaml`.
Between two commits `dvc metrics diff`, `dvc plots diff` and `dvc params diff` show the change; after
`dvc exp run -S` (composed through Hydra, as the project's experiments are) `dvc exp show` lists the
experiment with its param and metrics beside the commit's."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


def _entries(stage: dict, key: str) -> list[tuple[str, dict]]:
    """A stage's `outs`/`metrics`/`plots` as (path, options) pairs."""
    pairs = []
    for entry in stage.get(key) or []:
        if isinstance(entry, dict):
            path, options = next(iter(entry.items()))
            pairs.append((path, options or {}))
        else:
            pairs.append((entry, {}))
    return pairs


def _interpolate(path: str, params: dict) -> str:
    while "${" in path:
        start = path.index("${")
        end = path.index("}", start)
        value: object = params
        for part in path[start + 2:end].split("."):
            value = value[part]  # type: ignore[index]
        path = path[:start] + str(value) + path[end + 1:]
    return path


def _git_ignored(path: str, cwd: Path) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=cwd).returncode == 0


def test_git_tracks_every_uncached_output_and_ignores_every_cached_one():
    dvc_yaml = yaml.safe_load((REPO / "dvc.yaml").read_text())
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    uncached, cached = [], []
    for stage in dvc_yaml["stages"].values():
        for key in ("outs", "metrics", "plots"):
            for path, options in _entries(stage, key):
                (uncached if options.get("cache") is False else cached).append(_interpolate(path, params))
    assert any(p.startswith("metrics/") for p in uncached)
    wrongly_ignored = [p for p in uncached if _git_ignored(p, REPO)]
    assert not wrongly_ignored, f"cache: false outputs must be versioned by git, but .gitignore hides {wrongly_ignored}"
    in_git_too = [p for p in cached if not _git_ignored(p, REPO)]
    assert not in_git_too, f"DVC-cached outputs must be git-ignored, else git versions them too: {in_git_too}"
    tracked = subprocess.run(["git", "ls-files", "metrics"], cwd=REPO, capture_output=True, text=True).stdout.split()
    metrics = [p for p in uncached if p.startswith("metrics/")]
    assert set(metrics) <= set(tracked), f"not committed: {sorted(set(metrics) - set(tracked))}"


# The stand-in for every stage: writes the stage's declared metric files (JSON) and plot data (CSV with the
# columns the top-level plots chart) from evolve.sigma0, so each change of that param changes every output.
WRITER = '''
import csv, json, sys, yaml
params = yaml.safe_load(open("params.yaml"))
sigma0 = params["evolve"]["sigma0"]
for spec in sys.argv[1:]:
    kind, path, *columns = spec.split(":")
    if kind == "json":
        json.dump({"reward": round(1 - sigma0, 4), "detail": {"sigma0": sigma0}, "seed": params["seed"]},
                  open(path, "w"), indent=2)
    else:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for g in range(3):
                w.writerow([g] + [round(g * sigma0 + i, 4) for i in range(1, len(columns))])
'''


def _plot_columns(plots: list) -> dict[str, list[str]]:
    """CSV path -> x column then every y column the top-level plots read from it."""
    columns: dict[str, list[str]] = {}
    for entry in plots:
        _, spec = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        for path, ys in (spec.get("y") or {}).items():
            cols = columns.setdefault(path, [spec["x"]])
            cols += [y for y in ([ys] if isinstance(ys, str) else ys) if y not in cols]
    return columns


def _tiny_dvc_yaml(project: dict) -> tuple[dict, list[str], list[str]]:
    """One cheap stage that declares every metric file and every charted plot-data file of the project's stages
    as they declare them (one stage: each stage command is a process start, and only the declarations matter
    here), plus the project's top-level plots unchanged. Returns it, the metric files and the plot files."""
    columns = _plot_columns(project.get("plots") or [])
    metrics, data = [], []
    for stage in project["stages"].values():
        metrics += _entries(stage, "metrics")
        data += [(p, o) for p, o in _entries(stage, "outs") + _entries(stage, "plots") if p in columns]
    specs = [f"json:{p}" for p, _ in metrics] + [":".join(["csv", p, *columns[p]]) for p, _ in data]
    stage = {"cmd": "python write_outputs.py " + " ".join(specs), "deps": ["write_outputs.py"],
             "params": ["seed", "evolve.sigma0"], "outs": [{p: o} for p, o in data],
             "metrics": [{p: o} for p, o in metrics]}
    return {"stages": {"pipeline": stage}, "plots": project["plots"]}, [p for p, _ in metrics], [p for p, _ in data]


def _run(args: list[str], cwd: Path, env: dict) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


def _set_sigma0(repo: Path, sigma0: float) -> None:
    """What `make params` does: the Hydra config (here a one-file conf/) and params.yaml say the same."""
    cfg = {"seed": 0, "evolve": {"sigma0": sigma0, "popsize": 8}}
    (repo / "conf" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (repo / "params.yaml").write_text(yaml.safe_dump(cfg))


def test_metrics_plots_params_and_experiments_diff_across_commits(tmp_path):
    repo = tmp_path / "repo"
    (repo / "conf").mkdir(parents=True)
    (repo / "metrics").mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    dvc = str(BIN / "dvc")
    _run(["git", "init", "-q"], repo, env)
    # what `dvc init` makes, without its process start; the project's config turns Hydra on (`-S` composes conf/)
    (repo / ".dvc").mkdir()
    (repo / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    (repo / ".dvcignore").write_text("")
    shutil.copy(REPO / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    tiny, metric_files, plot_files = _tiny_dvc_yaml(yaml.safe_load((REPO / "dvc.yaml").read_text()))
    assert "metrics/evolve.json" in metric_files and "metrics/generations.csv" in plot_files
    (repo / "dvc.yaml").write_text(yaml.safe_dump(tiny, sort_keys=False))
    (repo / "write_outputs.py").write_text(WRITER)

    _set_sigma0(repo, 0.03)
    _run([dvc, "repro", "-q"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "first run"], repo, env)
    committed = _run(["git", "ls-files"], repo, env).split()
    assert set(metric_files + plot_files) <= set(committed), "the project's .gitignore hides metrics from git"

    _set_sigma0(repo, 0.1)
    _run([dvc, "repro", "-q"], repo, env)
    _run(["git", "commit", "-qam", "second run"], repo, env)

    metrics = json.loads(_run([dvc, "metrics", "diff", "HEAD~1", "HEAD", "--json"], repo, env))
    assert set(metrics) == set(metric_files)
    for path in metric_files:
        change = metrics[path]["reward"]
        assert (change["old"], change["new"]) == (0.97, 0.9) and abs(change["diff"] + 0.07) < 1e-9

    plots = json.loads(_run([dvc, "plots", "diff", "HEAD~1", "HEAD", "--json"], repo, env))
    assert set(plots["data"]) == {next(iter(p)) for p in tiny["plots"]}, "each top-level chart once, nothing else"
    for charts in plots["data"].values():
        values = charts[0]["content"]["data"]["values"]
        by_rev = {rev: [v for v in values if v["rev"] == rev] for rev in ("HEAD~1", "HEAD")}
        assert all(by_rev.values()), "both commits' data in the chart"
        last = {rev: {k: v for k, v in rows[-1].items() if k != "rev"} for rev, rows in by_rev.items()}
        assert last["HEAD~1"] != last["HEAD"]

    params = json.loads(_run([dvc, "params", "diff", "HEAD~1", "HEAD", "--json"], repo, env))
    assert set(params["params.yaml"]) == {"evolve.sigma0"}
    assert {k: params["params.yaml"]["evolve.sigma0"][k] for k in ("old", "new")} == {"old": 0.03, "new": 0.1}

    _run([dvc, "exp", "run", "-S", "evolve.sigma0=0.3", "-n", "wider"], repo, env)
    shown = json.loads(_run([dvc, "exp", "show", "--json"], repo, env))
    head = next(row for row in shown if row["rev"] != "workspace")
    exp = next(e["revs"][0] for e in head["experiments"] if e["revs"][0]["name"] == "wider")
    assert exp["data"]["params"]["params.yaml"]["data"]["evolve"]["sigma0"] == 0.3
    for path in metric_files:
        assert exp["data"]["metrics"][path]["data"]["reward"] == 0.7
        assert head["data"]["metrics"][path]["data"]["reward"] == 0.9
    with open(repo / plot_files[0], newline="") as f:
        assert list(csv.reader(f))[-1][1] == str(round(2 * 0.3 + 1, 4)), "the experiment's plot data is applied"
