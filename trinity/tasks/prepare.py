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
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from trinity.errors import TrinityError
from trinity.files import sha256_file
from trinity.seeding import derive_seed
from trinity.tasks.base import FilteredRow, SuiteSettings, TaskSuite, as_json
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


def source_key(suite: TaskSuite, *, seed: int, fractions: dict[str, float], transfer: bool,
               max_items: int | None) -> str:
    """What decides a suite's prepared rows: its source and version (a package's version, a hub revision, a
    local file's content hash), its options, the seed, the splits, the subsample and its role. Two runs
    with the same key prepare the same bytes, so a retraining run takes the earlier file instead."""
    import hashlib

    facts = {"suite": suite.name, "kind": suite.kind, "source": suite.source_name, "version": suite.version,
             "options": suite.options, "seed": seed, "splits": fractions, "max_items": max_items,
             "role": "transfer" if transfer else "train", "columns": list(COLUMNS)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def reusable_suite(name: str, key: str, reuse_from: Sequence[str | Path]) -> tuple[Path, dict[str, Any]] | None:
    """The first earlier prepared folder whose manifest has `name` under the same source key and whose file
    is still the one that manifest describes (sha256): (its parquet, its manifest entry)."""
    for folder in reuse_from:
        manifest_path = Path(folder) / "manifest.json"
        try:
            entry = json.loads(manifest_path.read_text())["suites"][name]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        path = Path(folder) / f"{name}.parquet"
        if entry.get("source_key") == key and path.is_file() and entry.get("sha256") == sha256_file(path):
            return path, entry
    return None


def prepare_suites(settings: SuiteSettings, out_dir: str | Path, *, reuse_from: Sequence[str | Path] = (),
                   changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write `<out_dir>/<suite>.parquet` for every suite in tasks.train + tasks.transfer (of `settings.tasks`,
    the typed section; trinity.pipeline.suites.prepare_from_config reads it from a whole config) and
    `<out_dir>/manifest.json`; returns the manifest. A suite whose source is unavailable raises a
    TrinityError naming it (with the local-file hint) before anything is written.

    `reuse_from`: earlier prepared folders (a retraining run's champion run, the pipeline's own). A suite
    whose source key matches one of theirs is copied from it, not read and prepared again; the others
    are prepared. `changes`, when given, is filled with {"reused": {suite: folder}, "prepared": {suite:
    why}}. The manifest does not record which happened, so both ways give the same bytes."""
    tasks = settings.tasks
    train = [str(s) for s in tasks.train]
    transfer = [str(s) for s in tasks.transfer if str(s) not in train]
    fractions = {k: float(v) for k, v in vars(tasks.splits).items()}
    max_items = None if tasks.max_items_per_suite is None else int(tasks.max_items_per_suite)
    seed = int(settings.seed)
    suites = {name: get_suite(name, settings) for name in train + transfer}
    out = Path(out_dir)
    manifest: dict[str, Any]
    frames, copies = {}, {}
    manifest = {"seed": seed, "splits": fractions, "max_items_per_suite": max_items, "suites": {}}
    report = changes if changes is not None else {}
    report.update(reused={}, prepared={})
    for name, suite in suites.items():
        try:
            key = source_key(suite, seed=seed, fractions=fractions, transfer=name in transfer, max_items=max_items)
            earlier = reusable_suite(name, key, reuse_from)
            if earlier is not None:
                copies[name], manifest["suites"][name] = earlier
                report["reused"][name] = str(earlier[0].parent)
                continue
            frame, entry = prepare_suite(suite, seed=seed, fractions=fractions, transfer=name in transfer,
                                         max_items=max_items)
        except TrinityError as e:
            raise type(e)(f"prepare: suite '{name}': {e}") from None
        report["prepared"][name] = why_prepared(name, key, suite.version, reuse_from)
        frames[name], manifest["suites"][name] = frame, {**entry, "source_key": key}
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in frames.items():
        frame.write_parquet(out / f"{name}.parquet")
        manifest["suites"][name]["sha256"] = sha256_file(out / f"{name}.parquet")
    for path in copies.values():
        if path.resolve() != (out / path.name).resolve():
            shutil.copyfile(path, out / path.name)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def why_prepared(name: str, key: str, version: str, reuse_from: Sequence[str | Path]) -> str:
    """Why a suite was prepared anew, for the retraining report."""
    if not reuse_from:
        return "no earlier data to reuse"
    for folder in reuse_from:
        try:
            entry = json.loads((Path(folder) / "manifest.json").read_text())["suites"][name]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if entry.get("version") != version:
            return f"source version {entry.get('version')} -> {version}"
        if entry.get("source_key") != key:
            return "its options, seed, splits or subsample changed"
        return "the earlier file no longer matches its manifest"
    return "new suite"


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
