"""The cost-quality frontier of trained coordinators (heads): which are worth serving, and for which budget.

A head is *dominated* when another head has at least its reward at no more than its cost, and is strictly
better on one of the two; the others form the frontier. Two heads with exactly the same reward and cost
dominate neither each other, so both stay (serving picks between them by its own tie rules). Reward and
cost are per query on the same test items; the intervals (95%) describe each head on its own and decide
nothing about dominance, which is on the measured means.

Costs are in one unit for a whole frontier: dollars at list prices (`usd`) when every pool model has a
price, else thousands of prompt + completion tokens (`ktokens`), as the fitness's cost term was.
Pure functions over the evaluation's results table (trinity.eval.tables), plus the picture.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from trinity.errors import ConfigError
from trinity.stats import bootstrap_ci, interval

METHOD_PREFIX = "frontier:"     # the results table names a head's episodes `frontier:<head>`
UNITS = {"usd": "dollars per query (list prices)", "ktokens": "thousands of tokens per query (prompt + completion)"}

FRONTIER_SCHEMA = {
    "name": pl.Utf8,             # the head (cost_w<weight>) or a baseline method (single:<m>, random, moa:<m>)
    "kind": pl.Utf8,             # head | baseline
    "cost_weight": pl.Float64,   # the fitness's cost weight it was trained with (null: a baseline)
    "n": pl.Int64,               # episodes (test items x repeats); the intervals count items
    "reward": pl.Float64,
    "reward_low": pl.Float64,
    "reward_high": pl.Float64,
    "reward_ci": pl.Utf8,        # wilson | bootstrap (trinity.stats.interval)
    "cost": pl.Float64,          # per query, in `cost_unit`
    "cost_low": pl.Float64,      # percentile bootstrap of the mean cost per query
    "cost_high": pl.Float64,
    "cost_unit": pl.Utf8,
    "cost_per_query_usd": pl.Float64,
    "tokens_per_query": pl.Float64,
    "calls_per_query": pl.Float64,
    "on_frontier": pl.Boolean,   # heads only: not dominated by another head (baselines: null)
}


def non_dominated(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For (reward, cost) points: True where no other point has reward >= and cost <= with one strict."""
    out = []
    for i, (r, c) in enumerate(points):
        out.append(not any(j != i and rj >= r and cj <= c and (rj > r or cj < c)
                           for j, (rj, cj) in enumerate(points)))
    return out


def episode_cost(frame: pl.DataFrame, unit: str) -> pl.Series:
    if unit == "usd":
        return frame["cost_usd"]
    if unit == "ktokens":
        return (frame["prompt_tokens"] + frame["completion_tokens"]) / 1000.0
    raise ValueError(f"cost unit must be one of {list(UNITS)}, got {unit!r}")


def frontier_table(results: pl.DataFrame, heads: Mapping[str, float], unit: str, *, samples: int = 2000,
                   seed: int = 0) -> pl.DataFrame:
    """One row per head (`heads`: name -> cost weight; its episodes are method `frontier:<name>`) and per
    other method in `results` (a baseline), all suites pooled; heads marked on the frontier."""
    rows: list[dict[str, Any]] = []
    for key, g in results.group_by("method", maintain_order=True):
        method = str(key[0] if isinstance(key, tuple) else key)
        head = method[len(METHOD_PREFIX):] if method.startswith(METHOD_PREFIX) else None
        if head is not None and head not in heads:
            continue
        # over items, each item's repeats averaged first: replays of one item are not independent samples
        per_item = (g.with_columns(episode_cost(g, unit).alias("_cost")).group_by("suite", "item")
                    .agg(pl.col("reward").mean(), pl.col("_cost").mean()).sort("suite", "item"))
        reward, r_lo, r_hi, how = interval(per_item["reward"].to_list(), samples=samples, seed=seed)
        cost, c_lo, c_hi = bootstrap_ci(per_item["_cost"].to_list(), samples=samples, seed=seed)
        n = g.height
        rows.append({"name": head or method, "kind": "head" if head else "baseline",
                     "cost_weight": float(heads[head]) if head else None, "n": n, "reward": reward,
                     "reward_low": r_lo, "reward_high": r_hi, "reward_ci": how, "cost": cost, "cost_low": c_lo,
                     "cost_high": c_hi, "cost_unit": unit, "cost_per_query_usd": float(g["cost_usd"].sum()) / n,
                     "tokens_per_query": float((g["prompt_tokens"] + g["completion_tokens"]).sum()) / n,
                     "calls_per_query": float(g["calls"].sum()) / n, "on_frontier": None})
    head_rows = [r for r in rows if r["kind"] == "head"]
    for row, keep in zip(head_rows, non_dominated([(r["reward"], r["cost"]) for r in head_rows]), strict=True):
        row["on_frontier"] = keep
    frame = pl.DataFrame(rows, schema=FRONTIER_SCHEMA)
    return frame.sort(["kind", "cost", "reward"], descending=[True, False, True])


def heads_of(table: pl.DataFrame, *, frontier_only: bool = False) -> list[dict]:
    """The head rows, cheapest first (ties: higher reward first)."""
    heads = table.filter(pl.col("kind") == "head")
    if frontier_only:
        heads = heads.filter(pl.col("on_frontier"))
    return heads.sort(["cost", "reward"], descending=[False, True]).to_dicts()


def near_head(table: pl.DataFrame, reference: str, *, reward_gap: float = 0.02) -> dict | None:
    """The cheapest frontier head whose reward is within `reward_gap` of the `reference` head's (the
    cost-blind one): how much cheaper the same quality comes. None without that reference head."""
    rows = {r["name"]: r for r in heads_of(table)}
    ref = rows.get(reference)
    if ref is None:
        return None
    close = [r for r in heads_of(table, frontier_only=True) if r["reward"] >= ref["reward"] - reward_gap]
    if not close:
        return None
    best = close[0]
    return {"head": best["name"], "reference": reference, "reward": best["reward"], "reference_reward": ref["reward"],
            "reward_gap": ref["reward"] - best["reward"], "cost": best["cost"], "reference_cost": ref["cost"],
            "cost_ratio": best["cost"] / ref["cost"] if ref["cost"] > 0 else None,
            "goal_met": bool(ref["reward"] - best["reward"] <= reward_gap + 1e-12
                             and ref["cost"] > 0 and best["cost"] <= 0.5 * ref["cost"])}


# ------------------------------------------------------------------------------------- the folder

def read_manifest(folder: str | Path, *, name: str | None = None) -> dict:
    """frontier.json of a frontier folder, the one reader of it (the report, `trinity eval --frontier` and
    serving use it). A folder without one, or with one that is not JSON, is refused naming `name` (the
    argument it came from, e.g. "--frontier") or the folder."""
    folder = Path(folder)
    label = f"{name} {folder}" if name else str(folder)
    path = folder / "frontier.json"
    if not path.is_file():
        raise ConfigError(f"{label}: no frontier.json there, so it is not a frontier folder "
                          "(the frontier stage writes one, in data/frontier)")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise ConfigError(f"{label}: frontier.json is not valid JSON: {e}") from None


def load_table(folder: str | Path) -> tuple[dict, pl.DataFrame | None]:
    """(manifest, frontier table) of a frontier folder; the table is None when the frontier is off.
    Refuses a folder that is not one, naming it."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if not manifest.get("enabled"):
        return manifest, None
    if not (folder / "frontier.parquet").is_file():
        raise ConfigError(f"{folder} has a manifest but no frontier.parquet: run the frontier stage again")
    return manifest, pl.read_parquet(folder / "frontier.parquet")


# ------------------------------------------------------------------------------------ serving's choice
QUALITY_LEVELS = ("low", "medium", "high")


def pick(points: Sequence[tuple[str, float, float]], level: str) -> str:
    """The head a `trinity.quality` level names among (name, reward, cost) points: `low` the cheapest
    (ties: the better reward), `high` the best reward (ties: the cheaper), `medium` the one whose reward
    is nearest the middle of the points' reward range (ties: the cheaper). Ties left after that go to
    the first name in alphabetical order, so a choice never depends on file order."""
    if not points:
        raise ValueError("no heads to choose from")
    if level == "low":
        key = lambda p: (p[2], -p[1], p[0])  # noqa: E731
    elif level == "high":
        key = lambda p: (-p[1], p[2], p[0])  # noqa: E731
    elif level == "medium":
        rewards = [p[1] for p in points]
        middle = (min(rewards) + max(rewards)) / 2.0
        key = lambda p: (abs(p[1] - middle), p[2], p[0])  # noqa: E731
    else:
        raise ValueError(f"quality must be one of {QUALITY_LEVELS}, got {level!r}")
    return min(points, key=key)[0]


def choose(points: Sequence[tuple[str, float, float]], *, unit: str, max_cost_usd: float | None = None,
           quality: str | None = None) -> tuple[str, str, str | None]:
    """(head, chosen_by, note) for one request over the frontier's (name, reward, cost) points.

    A budget (`max_cost_usd`, when the costs are in dollars) keeps the heads whose measured cost per query
    fits; below the cheapest head it keeps the cheapest, and the note says so (the request's cap still
    stops the episode once it is spent). `quality` then picks among the kept heads (`pick`); without it
    the best reward among them, so a budget alone gets the best head it affords and a request with
    neither gets the best head of all. Costs in ktokens cannot be compared with dollars: the budget then
    chooses nothing, and the note says so."""
    kept, note = list(points), None
    if max_cost_usd is not None:
        if unit != "usd":
            note = (f"the frontier's costs are in {unit} (the pool has no prices), so max_cost_usd "
                    f"{max_cost_usd:g} did not choose the head; it still caps the episode's spend")
        else:
            kept = [p for p in points if p[2] <= max_cost_usd]
            if not kept:
                cheapest = pick(points, "low")
                cost = next(p[2] for p in points if p[0] == cheapest)
                kept = [p for p in points if p[0] == cheapest]
                note = (f"max_cost_usd {max_cost_usd:g} is below the cheapest frontier head's measured cost per "
                        f"query ({cost:.6g}): serving the cheapest, {cheapest}; the cap still stops the episode "
                        "once it is spent")
    chosen_by = "quality" if quality is not None else ("max_cost_usd" if max_cost_usd is not None and unit == "usd"
                                                       else "default")
    return pick(kept, quality or "high"), chosen_by, note


# ------------------------------------------------------------------------------------------- words

def fmt_cost(x: float | None, unit: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"${x:.6f}" if unit == "usd" else f"{x:.3f} ktok"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def quality_levels(heads: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """head name -> the `trinity.quality` levels that pick it on a server loaded with these frontier heads."""
    points = [(str(h["name"]), float(h["reward"]), float(h["cost"])) for h in heads]
    out: dict[str, list[str]] = {}
    for level in ("low", "medium", "high"):
        if points:
            out.setdefault(pick(points, level), []).append(level)
    return {name: ", ".join(levels) for name, levels in out.items()}


def budget_table(table: pl.DataFrame) -> list[str]:
    """Markdown: per budget per query, the head `trinity serve --frontier` serves (the best reward whose
    measured cost fits; below the cheapest head, the cheapest), its expected reward and cost."""
    heads = heads_of(table, frontier_only=True)
    if not heads:
        return ["No head was evaluated."]
    unit = str(heads[0]["cost_unit"])
    levels = quality_levels(heads)
    out = ["| budget per query | head (cost weight) | expected reward [95% CI] | cost per query [95% CI] | "
           "`quality` |", "|---|---|---|---|---|"]

    def row(budget: str, h: Mapping[str, Any], note: str = "") -> str:
        return (f"| {budget} | `{h['name']}` ({h['cost_weight']:g}){note} | {_fmt(h['reward'])} "
                f"[{_fmt(h['reward_low'])}, {_fmt(h['reward_high'])}] | {fmt_cost(h['cost'], unit)} "
                f"[{fmt_cost(h['cost_low'], unit)}, {fmt_cost(h['cost_high'], unit)}] | {levels.get(h['name'], '')} |")

    out.append(row(f"below {fmt_cost(heads[0]['cost'], unit)}", heads[0], ", over budget"))
    best = None
    for i, h in enumerate(heads):
        if best is not None and h["reward"] <= best["reward"]:
            continue   # a dearer frontier head never has a lower reward; equal rewards keep the cheaper
        best = h
        nxt = next((x for x in heads[i + 1:] if x["reward"] > h["reward"]), None)
        span = (f"{fmt_cost(h['cost'], unit)} to {fmt_cost(nxt['cost'], unit)}" if nxt is not None
                else f"{fmt_cost(h['cost'], unit)} or more")
        out.append(row(span, h))
    return out


def section(table: pl.DataFrame, *, manifest: Mapping[str, Any], chart: str | None = None) -> list[str]:
    """The report's section on which head to serve (trinity.eval.report keeps its other sections)."""
    unit = str(manifest.get("cost_unit", "usd"))
    heads = heads_of(table)
    dominated = [h["name"] for h in heads if not h["on_frontier"]]
    weights = ", ".join(f"{w:g}" for w in manifest.get("cost_weights") or [])
    out = ["## Which head to serve for a budget (the cost-quality frontier)", "",
           f"The `frontier` stage trained one head per cost weight of `evolve.cost_weights` ({weights}; the "
           f"fitness's cost term in {'dollars at list prices' if unit == 'usd' else 'thousands of tokens'}) next to "
           f"the cost-blind main coordinator (`{manifest.get('reference_head', '?')}`), and measured every head on "
           f"{manifest.get('items', '?')} test items with `{manifest.get('routing', '?')}` routing. "
           "`trinity serve --frontier <folder>` serves them: a request's `trinity.max_cost_usd` gets the best-reward "
           "head whose measured cost per query fits (below the cheapest: the cheapest, with a note in the trace); "
           "`trinity.quality` low | medium | high the cheapest, the one nearest the middle of the reward range, the "
           "best reward.", ""]
    out += budget_table(table) + [""]
    if dominated:
        out += ["Dominated (another head is at least as good for no more cost): "
                + ", ".join(f"`{d}`" for d in dominated) + ".", ""]
    near = near_head(table, str(manifest.get("reference_head", "")))
    if near is not None and near["head"] != near["reference"]:
        ratio = f"{near['cost_ratio']:.2f}" if near["cost_ratio"] is not None else "n/a"
        out += [f"The cheapest frontier head within 0.02 of the cost-blind head's reward is `{near['head']}`: "
                f"reward {near['reward']:.3f} vs {near['reference_reward']:.3f}, at {ratio} of its cost per query.", ""]
    if chart:
        out += [f"![frontier]({chart})", ""]
    return out


def text_table(table: pl.DataFrame) -> str:
    """The budget table as plain text for a terminal (`trinity eval --frontier`)."""
    return "\n".join(budget_table(table))


# ------------------------------------------------------------------------------------------- picture

def plot(table: pl.DataFrame, path: Path, *, title: str) -> Path:
    """Reward against cost per query: the heads (the frontier joined, dominated heads hollow) and the
    baselines in the table, each with its 95% intervals on both axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 5.0), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    unit = str(table["cost_unit"][0]) if table.height else "usd"
    marks = {"single": "s", "random": "^", "moa": "D"}
    placed: list[tuple[float, float]] = []
    by_cost = [h["name"] for h in heads_of(table)]
    for r in table.to_dicts():
        xerr = [[max(0.0, r["cost"] - r["cost_low"])], [max(0.0, r["cost_high"] - r["cost"])]]
        yerr = [[max(0.0, r["reward"] - r["reward_low"])], [max(0.0, r["reward_high"] - r["reward"])]]
        if r["kind"] == "head":
            face = "tab:blue" if r["on_frontier"] else "none"
            ax.errorbar(r["cost"], r["reward"], xerr=xerr, yerr=yerr, fmt="o", color="tab:blue", mfc=face,
                        capsize=2, zorder=3)
            # heads crowd together (weights that route alike): names alternate above and below in cost
            # order, and coinciding heads stack theirs
            same = sum(1 for p in placed if math.isclose(p[0], r["cost"]) and math.isclose(p[1], r["reward"]))
            placed.append((r["cost"], r["reward"]))
            below = by_cost.index(r["name"]) % 2 == 1
            ax.annotate(f"w={r['cost_weight']:g}", (r["cost"], r["reward"]), textcoords="offset points",
                        xytext=(4, (-13 - 9 * same) if below else (5 + 9 * same)), fontsize=7, color="tab:blue")
        else:
            kind = r["name"].split(":", 1)[0]
            ax.errorbar(r["cost"], r["reward"], xerr=xerr, yerr=yerr, fmt=marks.get(kind, "x"), color="grey",
                        capsize=2, alpha=0.8, zorder=2)
            ax.annotate(r["name"], (r["cost"], r["reward"]), textcoords="offset points", xytext=(5, -9),
                        fontsize=6, color="dimgrey")
    front = heads_of(table, frontier_only=True)
    if front:
        ax.plot([h["cost"] for h in front], [h["reward"] for h in front], "-", color="tab:blue", alpha=0.6,
                label="heads cost_w<w> (w = cost weight): the frontier joined, dominated heads hollow")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel(UNITS.get(unit, unit))
    ax.set_ylabel("mean reward (95% CI)")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def placeholder(path: Path, message: str) -> Path:
    """The picture when there is no frontier (DVC needs the stage's outputs to exist)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 1.6), dpi=110)
    FigureCanvasAgg(fig)
    fig.text(0.5, 0.5, message, ha="center", va="center", fontsize=9, wrap=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def finite(x: Any) -> Any:
    """JSON has no NaN: None instead."""
    return None if isinstance(x, float) and not np.isfinite(x) else x
