"""Checkpoints an older evolution loop wrote, brought up to the current version one step at a time.

- 2 -> 3: every episode row was inside the checkpoint; they are written out as one Parquet part per step
  (x0 included), then the checkpoint is re-saved without them.
- 4 -> 5: the validations a selection rule reads (run["validations"]): a version 4 checkpoint kept only the
  best mean's parameters, so the history starts with that one, without per-item rewards (the rules then
  compare mean rewards, as version 4 did); validations after the resume join it in full.
- 3 -> 4: the strategy state was a plain dict; it becomes the algorithm's immutable state value with
  the same numbers. For sep-CMA-ES the random stream pycma had pickled inside its ES (numpy's `randn`
  bound to a copy of the RandomState its `seed` option seeded) moves into the state, so a resumed run
  draws exactly what the old code would have.

Each step is saved before the next, and its outputs first (a kill in between leaves the older checkpoint
to upgrade again). Anything older than 2 starts the run over (trinity.evolve.loop).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from trinity.evolve.checkpoint import save_checkpoint
from trinity.evolve.episode_parts import write_part
from trinity.evolve.errors import CheckpointError
from trinity.evolve.on_policy import ReinforceState
from trinity.evolve.outputs import RunPaths
from trinity.evolve.strategies import LentRandn, RandomSearchState, SepCMAState, frozen_array
from trinity.evolve.tables import episodes_frame

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


def _rows_to_parts(run: dict[str, Any], paths: RunPaths) -> dict[str, Any]:
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in run["episode_rows"]:
        by_step.setdefault(int(row["generation"]), []).append(row)
    refs = [write_part(paths.parts, g, episodes_frame(rows)) for g, rows in sorted(by_step.items())]
    run = {k: v for k, v in run.items() if k != "episode_rows"}
    return {**run, "version": 3, "episode_parts": refs}


def _typed_state(run: dict[str, Any], paths: RunPaths) -> dict[str, Any]:
    old = run["state"]
    if isinstance(old, dict):
        convert = _V3_STATES.get(str(old.get("strategy")))
        if convert is None:
            raise CheckpointError(f"checkpoint {paths.checkpoint} (version 3) holds a {old.get('strategy')!r} "
                                  "state this version cannot read; delete the run folder or start over with "
                                  "evolve.resume=false")
        run = {**run, "state": convert(old)}
    return {**run, "version": 4}


def _pending(old: dict[str, Any]) -> tuple[np.ndarray, ...] | None:
    return None if old["pending"] is None else tuple(frozen_array(x) for x in old["pending"])


def _sep_cma(old: dict[str, Any]) -> SepCMAState:
    es = pickle.loads(old["es"])
    source = es.opts["randn"].__self__
    randn = LentRandn()
    es.opts["randn"] = randn
    es.sm.randn = randn
    return SepCMAState(generation=int(old["generation"]), mean=frozen_array(old["mean"]), sigma=float(old["sigma"]),
                       pending=_pending(old), es=pickle.dumps(es), rng=source.get_state(legacy=False))


def _random_search(old: dict[str, Any]) -> RandomSearchState:
    mean = frozen_array(old["mean"])
    return RandomSearchState(generation=int(old["generation"]), mean=mean, sigma=float(old["sigma"]),
                             pending=_pending(old), center=frozen_array(np.zeros_like(mean)),  # version 3's x0
                             best_fitness=float(old["best_fitness"]), rng=old["rng"])


def _reinforce(old: dict[str, Any]) -> ReinforceState:
    return ReinforceState(generation=int(old["generation"]), mean=frozen_array(old["mean"]),
                          adam_m=frozen_array(old["adam_m"]), adam_v=frozen_array(old["adam_v"]), step=int(old["step"]),
                          grad_norm=float(old["grad_norm"]), baseline=old["baseline"])


_V3_STATES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "sep_cma": _sep_cma, "random_search": _random_search, "reinforce": _reinforce}
def _validation_history(run: dict[str, Any], paths: RunPaths) -> dict[str, Any]:
    best = run.get("best")
    history = []
    if best is not None and best.get("validation_reward") is not None:
        history.append({"generation": best["generation"], "params": np.asarray(best["params"], dtype=np.float64),
                        "validation_reward": best["validation_reward"], "by_mode": {}, "episodes": None,
                        "per_item": None, "train_reward": None, "describe": {}})
    return {**run, "version": 5, "validations": history, "validation_select": "max"}


_STEPS: dict[int, Callable[[dict[str, Any], RunPaths], dict[str, Any]]] = {
    2: _rows_to_parts, 3: _typed_state, 4: _validation_history}
