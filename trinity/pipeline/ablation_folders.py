"""Where the ablation stage keeps its trained variants, and which are there: read by the evaluate stage and by
`trinity eval`'s argument checks (which must not import the evaluate stage: it loads torch)."""

from __future__ import annotations

from pathlib import Path

from trinity.config_schema import TrinityConfig
from trinity.eval.methods import MethodSkipped


def ablations_root(cfg: TrinityConfig) -> Path:
    """paths.ablations: one sub-folder per trained variant."""
    return Path(cfg.paths.ablations)


def ablation_names(cfg: TrinityConfig) -> list[str]:
    """The ablation stage's sub-folders (one per variant); a missing root skips the `ablations` group."""
    root = ablations_root(cfg)
    if not root.is_dir():
        raise MethodSkipped(f"no trained ablations: {root} does not exist (the ablation stage has not run)")
    names = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not names:
        raise MethodSkipped(f"no trained ablations: {root} has no variant folders")
    return names
