"""Where a run outside `dvc repro` writes: its own folder, never a DVC stage's outputs.

`dvc repro` is the only writer of the pipeline's outputs (data/, metrics/, reports/), so `dvc.lock`
always describes them. A run triggered from the Prefect UI or by the retraining schedule gets a fresh
folder `<paths.ad_hoc_runs>/<UTC time>-<label>/` and the stages it runs write there instead; what
they read from stages they do not run (the prepared items, the cached states, the evolved coordinator)
still comes from the pipeline's outputs. Caches (`paths.cache`) stay shared: they are keyed on content.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from trinity.config import with_values
from trinity.config_schema import TrinityConfig
from trinity.errors import ConfigError

# The `paths.*` keys each stage writes (dvc.yaml's outs, metrics and plots of that stage live under
# them; tests/unit/test_workspace.py checks this against dvc.yaml).
STAGE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "prepare": ("prepared",),
    "cache_states": ("states", "metrics"),
    "evolve": ("runs", "metrics", "reports"),
    "frontier": ("frontier", "metrics", "reports"),
    "ablate": ("ablations", "metrics"),
    "evaluate": ("eval", "metrics", "reports"),
}
PIPELINE = tuple(STAGE_OUTPUTS)


def new_run_folder(root: str | os.PathLike, label: str, *, now: dt.datetime | None = None) -> Path:
    """A folder that did not exist before: `<root>/<YYYYmmddTHHMMSSZ>-<label>[-n]`, created here."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        folder = root / (f"{stamp}-{label}" if n == 0 else f"{stamp}-{label}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise ConfigError(f"could not create a new run folder under {root}")


def output_paths(cfg: TrinityConfig, stages: Iterable[str], folder: str | os.PathLike) -> dict[str, str]:
    """`paths.<key>` -> its place inside `folder`, for every key the given stages write."""
    unknown = [s for s in stages if s not in STAGE_OUTPUTS]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; known: {list(STAGE_OUTPUTS)}")
    keys = sorted({k for s in stages for k in STAGE_OUTPUTS[s]})
    paths = cfg.paths
    out = {}
    for key in keys:
        value = getattr(paths, key)
        if value is None:
            raise ConfigError(f"config key 'paths.{key}' is missing")
        rel = Path(str(value))
        # An absolute path keeps its layout below the run folder, without its root.
        rel = rel.relative_to(rel.anchor) if rel.is_absolute() else rel
        out[key] = str(Path(folder) / rel)
    return out


def apply_output_paths(cfg: TrinityConfig, mapping: Mapping[str, str] | None) -> TrinityConfig:
    """The typed config with `paths.<key>` replaced by `mapping[key]` (a copy; `cfg` is left alone)."""
    if not mapping:
        return cfg
    for key in mapping:
        if key not in STAGE_OUTPUTS_KEYS:
            raise ConfigError(f"output path key {key!r} is not a stage output; known: {sorted(STAGE_OUTPUTS_KEYS)}")
    return with_values(cfg, {f"paths.{key}": str(value) for key, value in mapping.items()})


STAGE_OUTPUTS_KEYS = frozenset(k for keys in STAGE_OUTPUTS.values() for k in keys)


def earlier_outputs(cfg: TrinityConfig, label: str, key: str, *, exclude: str | os.PathLike | None = None,
                    newest: int = 5) -> list[str]:
    """`paths.<key>` of the newest earlier `<label>` run folders under `paths.ad_hoc_runs` (newest first,
    at most `newest`, only those that hold it), then the pipeline's own `paths.<key>`: where a recurring
    run looks for what it need not compute again. `exclude`: this run's own place."""
    paths = cfg.paths
    root = Path(paths.ad_hoc_runs)
    value = getattr(paths, key)
    if value is None:
        raise ConfigError(f"config key 'paths.{key}' is missing")
    rel = Path(str(value))
    rel = rel.relative_to(rel.anchor) if rel.is_absolute() else rel
    skip = Path(exclude).resolve() if exclude else None
    found = []
    folders = sorted((p for p in root.glob(f"*-{label}*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    for folder in folders:
        place = folder / rel
        if place.is_dir() and place.resolve() != skip:
            found.append(str(place))
        if len(found) == newest:
            break
    own = Path(str(value))
    if own.is_dir() and own.resolve() != skip:
        found.append(str(own))
    return found


def timings_dir(cfg: TrinityConfig, *parts: str) -> Path:
    """Where a stage's run facts go (paths.timings: wall times, pool work, cache hits; outside DVC's outputs)."""
    root = cfg.paths.timings
    path = Path(str(root)).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
