"""Items per split and mean prompt length of each suite: from the prepared Parquet files when they match this
config, else from DEFAULT_SUITES (rows measured on the offline packages; assumed for the hub-only suites)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import cast

from trinity.config_schema import TrinityConfig
from trinity.pipeline.workload import SuiteInfo

# suite -> (rows after filtering, mean prompt characters, fixed test rows or None). The first block was
# measured on the offline packages (`prepare`, tasks=offline_mix options, no cap); the rest is assumed.
DEFAULT_SUITES: dict[str, tuple[int, float, int | None]] = {
    "mmlu": (14015, 633, None), "gsm8k": (1319, 341, None), "math500": (311, 285, None),
    "humaneval": (164, 639, None), "gpqa_diamond": (198, 727, None), "aime": (60, 450, None),
    "bigcodebench": (473, 1375, None), "mtbench": (80, 300, None),
    "aime2024": (30, 450, None), "aime2025": (30, 450, None), "math500_full": (500, 300, None),
    "livecodebench": (1055, 1800, 655), "rlpr": (77000, 500, None), "mbpp": (500, 250, None),
}
MEASURED_SUITES = ("mmlu", "gsm8k", "math500", "humaneval", "gpqa_diamond", "aime", "bigcodebench", "mtbench")
FALLBACK_SUITE = (500, 600, None)


def suite_infos(cfg: TrinityConfig, suites: list[str]) -> dict[str, SuiteInfo]:
    folder = Path(cfg.paths.prepared)
    manifest = read_json(folder / "manifest.json")
    return {s: _suite_info(cfg, s, folder / f"{s}.parquet", manifest) for s in dict.fromkeys(suites)}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _suite_info(cfg: TrinityConfig, suite: str, parquet: Path, manifest: dict) -> SuiteInfo:
    rows, chars, fixed_test = DEFAULT_SUITES.get(suite, FALLBACK_SUITE)
    counts = _default_counts(cfg, suite, rows, fixed_test)
    source = "measured default" if suite in MEASURED_SUITES else "assumed default"
    if parquet.is_file():
        import polars as pl

        frame = pl.read_parquet(parquet, columns=["split", "prompt"])
        if frame.height:
            chars = float(cast(float, frame["prompt"].str.len_chars().mean()))   # a number: the frame has rows
            source += ", prompt lengths prepared"
        if _manifest_matches(cfg, suite, manifest):
            counts = {s: int(n) for s, n in frame.group_by("split").len().iter_rows()}
            source = "prepared"
    return SuiteInfo(suite, {s: counts.get(s, 0) for s in ("train", "validation", "test")}, chars, source)


def _manifest_matches(cfg: TrinityConfig, suite: str, manifest: dict) -> bool:
    entry = (manifest.get("suites") or {}).get(suite)
    if not entry:
        return False
    splits = {k: float(v) for k, v in dataclasses.asdict(cfg.tasks.splits).items()}
    role = "train" if suite in list(cfg.tasks.train) else "transfer"
    return (manifest.get("seed") == cfg.seed and manifest.get("splits") == splits
            and manifest.get("max_items_per_suite") == cfg.tasks.max_items_per_suite
            and entry.get("role") == role)


def _default_counts(cfg: TrinityConfig, suite: str, rows: int, fixed_test: int | None) -> dict[str, int]:
    cap = cfg.tasks.max_items_per_suite
    rows = min(rows, int(cap)) if cap is not None else rows
    if suite not in list(cfg.tasks.train):
        return {"test": rows}
    f = {k: float(v) for k, v in dataclasses.asdict(cfg.tasks.splits).items()}
    if fixed_test is not None:
        test = min(fixed_test, rows)
        rest = f.get("train", 0) + f.get("validation", 0)
        return {"test": test, **{s: round((rows - test) * f.get(s, 0) / rest) if rest else 0
                                 for s in ("train", "validation")}}
    return {s: round(rows * f.get(s, 0)) for s in ("train", "validation", "test")}
