"""Checkpoints an older evolution loop wrote, brought up to the current version one step at a time.

- 4 -> 5: the validations a selection rule reads (run["validations"]): a version 4 checkpoint kept only the
  best mean's parameters, so the history starts with that one, without per-item rewards (the rules then
  compare mean rewards, as version 4 did); validations after the resume join it in full.

Each step is saved before the next. Anything older than 4 starts the run over (trinity.evolve.loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from trinity.evolve.checkpoint import save_checkpoint
from trinity.evolve.outputs import RunPaths

log = logging.getLogger("trinity.evolve")

# 2: x0 validated as generation -1, both validation modes, diagnostics, routing rows
# 3: episode rows in per-step Parquet parts, the checkpoint holds references to them
# 4: the strategy state is the algorithm's typed, immutable state (trinity.evolve.strategy_registry)
# 5: every validated mean is kept (run["validations"]) for the selection rule (trinity.evolve.selection)
CHECKPOINT_VERSION = 5


def upgrade(run: dict[str, Any], paths: RunPaths) -> dict[str, Any]:
    """`run` at the current version when an upgrade path exists; otherwise unchanged (the caller starts over)."""
    while run.get("version") in _STEPS:
        run = _STEPS[run["version"]](run, paths)
        save_checkpoint(paths.checkpoint, run)
        log.info("evolve: upgraded %s to checkpoint version %d", paths.checkpoint, run["version"])
    return run


def _validation_history(run: dict[str, Any], paths: RunPaths) -> dict[str, Any]:
    best = run.get("best")
    history = []
    if best is not None and best.get("validation_reward") is not None:
        history.append({"generation": best["generation"], "params": np.asarray(best["params"], dtype=np.float64),
                        "validation_reward": best["validation_reward"], "by_mode": {}, "episodes": None,
                        "per_item": None, "train_reward": None, "describe": {}})
    return {**run, "version": 5, "validations": history, "validation_select": "max"}


_STEPS: dict[int, Callable[[dict[str, Any], RunPaths], dict[str, Any]]] = {4: _validation_history}
