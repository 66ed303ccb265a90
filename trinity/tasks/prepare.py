"""Prepare stage: every configured suite -> `<out_dir>/<suite>.parquet` plus `manifest.json`.

Columns: item_id, split, prompt, reference (JSON), meta (JSON), source, version.
- Splits are seeded per item: u = derive_seed(seed, "split", suite, item_id) / 2^63 is compared with the
  cumulative fractions of `tasks.splits` (train, validation, test). An item keeps its split when other
  items are added or removed, and the same seed always gives the same splits.
- Transfer suites (`tasks.transfer`) are zero-shot: all their rows are 'test'. A suite listed in both
  lists is treated as a training suite. A source-fixed split (LiveCodeBench's newer releases, a local
  file's `split` column) wins over the seeded one.
- `tasks.max_items_per_suite` keeps the N items with the smallest derive_seed(seed, "subsample",
  suite, item_id): a stable subsample (raising N only adds items).
- Malformed rows (MalformedRow), filtered rows (FilteredRow) and duplicate ids are counted and skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from trinity.errors import TrinityError
from trinity.seeding import derive_seed
from trinity.tasks.base import FilteredRow, TaskSuite, as_json
from trinity.tasks.registry import get_suite
from trinity.tasks.types import MalformedRow, TaskItem

SPLITS = ("train", "validation", "test")
COLUMNS = ("item_id", "split", "prompt", "reference", "meta", "source", "version")
_SCALE = float(1 << 63)


def assign_split(seed: int, suite: str, item_id: str, fractions: dict[str, float]) -> str:
    u = derive_seed(seed, "split", suite, item_id) / _SCALE
    edge = 0.0
    for name in SPLITS:
        edge += float(fractions.get(name, 0.0))
        if u < edge:
            return name
    return next(name for name in reversed(SPLITS) if float(fractions.get(name, 0.0)) > 0)


def build_items(suite: TaskSuite) -> tuple[list[tuple[TaskItem, str | None]], dict[str, int]]:
    """Items with their source-fixed split (or None), and the skip counts. Never raises on a bad row."""
    counts = {"rows": 0, "malformed": 0, "filtered": 0, "duplicate": 0}
    seen: set[str] = set()
    items = []
    for row in suite.load_rows():
        counts["rows"] += 1
        try:
            item = suite.to_item(row)
        except FilteredRow:
            counts["filtered"] += 1
            continue
        except (MalformedRow, KeyError, TypeError, ValueError, AttributeError, IndexError):
            counts["malformed"] += 1
            continue
        if item.item_id in seen:
            counts["duplicate"] += 1
            continue
        seen.add(item.item_id)
        items.append((item, suite.default_split(row) if isinstance(row, dict) else None))
    return items, counts


def prepare_suite(suite: TaskSuite, *, seed: int, fractions: dict[str, float], transfer: bool,
                  max_items: int | None) -> tuple[pl.DataFrame, dict[str, Any]]:
    items, counts = build_items(suite)
    if max_items is not None and len(items) > max_items:
        items = sorted(items, key=lambda pair: derive_seed(seed, "subsample", suite.name, pair[0].item_id))
        items = items[:int(max_items)]
    items.sort(key=lambda pair: pair[0].item_id)
    rows = []
    for item, fixed in items:
        split = fixed or ("test" if transfer else assign_split(seed, suite.name, item.item_id, fractions))
        rows.append({"item_id": item.item_id, "split": split, "prompt": item.prompt,
                     "reference": as_json(item.reference), "meta": as_json(item.meta),
                     "source": suite.source_name, "version": suite.version})
    frame = pl.DataFrame(rows, schema={c: pl.String for c in COLUMNS})
    split_counts = {s: int((frame["split"] == s).sum()) for s in SPLITS}
    entry = {"kind": suite.kind, "source": suite.source_name, "version": suite.version,
             "role": "transfer" if transfer else "train", "items": frame.height, "splits": split_counts,
             "skipped": {k: v for k, v in counts.items() if k != "rows"}, "rows_read": counts["rows"]}
    return frame, entry


def prepare_suites(cfg: Any, out_dir: str | Path) -> dict[str, Any]:
    """Write `<out_dir>/<suite>.parquet` for every suite in tasks.train + tasks.transfer and
    `<out_dir>/manifest.json`; returns the manifest. A suite whose source is unavailable raises a
    TrinityError naming it (with the local-file hint) before anything is written."""
    tasks = cfg.tasks
    train = [str(s) for s in tasks.train]
    transfer = [str(s) for s in tasks.transfer if str(s) not in train]
    fractions = {k: float(v) for k, v in tasks.splits.items()}
    max_items = tasks.get("max_items_per_suite")
    seed = int(cfg.seed)
    suites = {name: get_suite(name, cfg) for name in train + transfer}
    out = Path(out_dir)
    frames, manifest = {}, {"seed": seed, "splits": fractions, "max_items_per_suite": max_items, "suites": {}}
    for name, suite in suites.items():
        try:
            frame, entry = prepare_suite(suite, seed=seed, fractions=fractions, transfer=name in transfer,
                                         max_items=None if max_items is None else int(max_items))
        except TrinityError as e:
            raise type(e)(f"prepare: suite '{name}': {e}") from None
        frames[name], manifest["suites"][name] = frame, entry
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in frames.items():
        frame.write_parquet(out / f"{name}.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def load_items(prepared_dir: str | Path, suite: str, split: str | None = None) -> list[TaskItem]:
    """Items of one prepared suite (optionally one split), in item_id order."""
    path = Path(prepared_dir) / f"{suite}.parquet"
    if not path.exists():
        raise TrinityError(f"prepared suite file {path} does not exist; run the prepare stage first")
    frame = pl.read_parquet(path)
    if split is not None:
        if split not in SPLITS:
            raise TrinityError(f"split must be one of {SPLITS}, got {split!r}")
        frame = frame.filter(pl.col("split") == split)
    return [TaskItem(suite=suite, item_id=r["item_id"], prompt=r["prompt"], reference=json.loads(r["reference"]),
                     split=r["split"], meta=json.loads(r["meta"])) for r in frame.iter_rows(named=True)]
