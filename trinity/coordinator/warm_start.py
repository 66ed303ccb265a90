"""Warm start: a trained coordinator's parameters as the x0 of a new run, mapped onto the new pool.

The flat vector (trinity.coordinator.layout) is [svf offsets | head]. The SVF offsets and the role rows
carry over as they are; the head's agent rows follow the pool models by NAME: a model in both pools keeps
its row (wherever it now sits), a new model's row starts at zero (its logit is 0 for every feature, so it
starts at the average of the others' routing scale), a removed model's row is dropped. What cannot carry
over is refused with a CoordinatorMismatchError: another backbone (id, revision, hidden size) or other
SVF matrices make the numbers mean something else.

Feature statistics (coordinator.features.normalize) are the new run's own: a saved coordinator's are
not carried over, so after a data change the mapped head reads slightly different inputs (said in the
report when the saved one standardised).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trinity.contracts import ROLES
from trinity.coordinator.saved import CoordinatorMismatchError, load_saved

# Must match for the parameter vector to mean the same thing on the new run.
SAME = ("backbone_id", "backbone_revision", "hidden_size", "svf_matrices")


@dataclass(frozen=True)
class WarmStart:
    x0: np.ndarray
    source: str
    kept: tuple[tuple[str, int, int], ...]   # (model, row in the saved head, row in the new head)
    added: tuple[str, ...]                   # new models: zero rows
    removed: tuple[str, ...]                 # dropped rows
    notes: tuple[str, ...] = field(default=())

    @property
    def digest(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.x0, dtype=np.float64).tobytes()).hexdigest()[:16]

    def lines(self) -> list[str]:
        moved = [f"{m} (row {a} -> {b})" for m, a, b in self.kept if a != b]
        out = [f"warm start from {self.source}: {len(self.kept)} model rows kept by name"
               + (f", moved: {', '.join(moved)}" if moved else ""),
               f"new models (rows start at 0): {', '.join(self.added) or 'none'}",
               f"removed models (rows dropped): {', '.join(self.removed) or 'none'}"]
        return out + list(self.notes)

    def report(self) -> dict[str, Any]:
        return {"source": self.source, "kept": [list(k) for k in self.kept], "added": list(self.added),
                "removed": list(self.removed), "notes": list(self.notes), "x0_sha256": self.digest}


def map_params(params: np.ndarray, saved: dict[str, Any], target: dict[str, Any], *,
               source: str = "") -> WarmStart:
    """`params` of a coordinator saved with metadata `saved`, as a vector of the layout `target` describes
    (Coordinator.metadata() of the new run: pool_models, hidden_size, svf_matrices, num_params, ...)."""
    problems = [f"{k}: saved {saved.get(k)!r}, this run {target.get(k)!r}" for k in SAME
                if k in target and _norm(saved.get(k)) != _norm(target.get(k))]
    if problems:
        raise CoordinatorMismatchError(f"cannot warm-start from {source or 'the saved coordinator'}: its parameters "
                                       f"belong to another backbone or layout ({'; '.join(problems)})")
    old_models = [str(m) for m in saved.get("pool_models") or []]
    new_models = [str(m) for m in target["pool_models"]]
    d = int(target["hidden_size"])
    params = np.asarray(params, dtype=np.float64).ravel()
    svf_size = sum(int(n) for _, n in target.get("svf_matrices") or [])
    old_head_size = (len(old_models) + len(ROLES)) * d
    notes = []
    prior_turns = int(saved.get("turn_prior_turns") or 0)
    if prior_turns and params.size == svf_size + old_head_size + prior_turns * (len(old_models) + len(ROLES)):
        # a constant policy's per-turn prior (trinity.pipeline.constant_policy) is no searched parameter
        params = params[: svf_size + old_head_size]
        notes.append(f"the saved coordinator's per-turn prior ({prior_turns} turns, kept as "
                     + str(saved.get("candidate")) + ") is not carried over: evolution searches the head only")
    if not old_models or params.size != svf_size + old_head_size:
        raise CoordinatorMismatchError(f"cannot warm-start from {source or 'the saved coordinator'}: "
                                       f"{params.size} parameters do not fit {len(old_models)} pool models, "
                                       f"{len(ROLES)} roles and hidden size {d} (+ {svf_size} SVF offsets)")
    old_head = params[svf_size:].reshape(len(old_models) + len(ROLES), d)
    new_head = np.zeros((len(new_models) + len(ROLES), d))
    kept = []
    for row, name in enumerate(new_models):
        if name in old_models:
            new_head[row] = old_head[old_models.index(name)]
            kept.append((name, old_models.index(name), row))
    new_head[len(new_models):] = old_head[len(old_models):]
    if str(saved.get("feature_normalize", "none")) != "none":
        notes.append(f"the saved coordinator read {saved.get('feature_normalize')} features; this run uses its own "
                     "feature statistics")
    x0 = np.concatenate([params[:svf_size], new_head.ravel()])
    if "num_params" in target and x0.size != int(target["num_params"]):
        raise CoordinatorMismatchError(f"cannot warm-start: mapped {x0.size} parameters, this run has "
                                       f"{target['num_params']}")
    return WarmStart(x0, source, tuple(kept), tuple(m for m in new_models if m not in old_models),
                     tuple(m for m in old_models if m not in new_models), tuple(notes))


def load_warm_start(path: str | os.PathLike[str], target: dict[str, Any]) -> WarmStart:
    """map_params of the coordinator saved at `path` (its .safetensors file)."""
    params, meta, _ = load_saved(Path(path))
    return map_params(params, meta, target, source=str(path))


def _norm(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))
