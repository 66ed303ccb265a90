"""The frontier hand-off of the evaluate stage: when the frontier stage (or a `trinity eval --frontier`
folder) holds a cost-quality frontier, the report ends with which of its heads to serve for a budget."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def load_frontier(path: Path | None) -> tuple[dict, pl.DataFrame] | None:
    """(manifest, table) of the frontier folder at `path`; None without one, or when it is off."""
    if path is None or not (Path(path) / "frontier.json").is_file():
        return None
    from trinity.eval.frontier import load_table

    manifest, table = load_table(path)
    return None if table is None else (manifest, table)


def frontier_section(frontier: tuple[dict, pl.DataFrame], reports: Path) -> list[str]:
    """The frontier's section, with its picture: the frontier stage's (reports/frontier.png) when it lies
    beside the report, else drawn here from the frontier's own table (a `trinity eval` folder)."""
    from trinity.eval import frontier as fr

    manifest, table = frontier
    chart = "frontier.png"
    if not (reports / chart).is_file():
        chart = "eval/frontier.png"
        fr.plot(table, reports / chart, title=f"cost-quality frontier\n({manifest.get('items', '?')} test items, "
                                              f"{manifest.get('routing', '?')} routing)")
    return fr.section(table, manifest=manifest, chart=chart)
