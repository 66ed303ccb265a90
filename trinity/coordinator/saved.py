"""Saved coordinators: the flat parameter vector in safetensors, with metadata that loading checks.

The metadata (JSON, stored in the safetensors header and copied next to the file for people) names the
backbone (id, revision), hidden size, pool model names in head order, the roles the head may pick
(`coordinator.roles`; the head always has the three role rows of ROLES), token position, SVF matrices
and parameter count, and the feature normalisation (`feature_normalize`; `coordinator.features.normalize`).
A coordinator saved for another pool or backbone is refused with a CoordinatorMismatchError, never used
to route silently to the wrong models.

Besides `params`, the file may hold named extra tensors: a coordinator trained with
`normalize=standardize` stores its feature statistics (`feature_mean`, `feature_std`) there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file  # numpy, not torch: `trinity serve` refuses a file before importing torch

from trinity.coordinator.feature_norm import FeatureNorm
from trinity.errors import TrinityError

FORMAT = "trinity-coordinator/1"
# Keys that must match exactly between a saved coordinator and the configuration loading it.
CHECKED_KEYS = ("backbone_id", "backbone_revision", "hidden_size", "pool_models", "roles", "token_position",
                "svf_matrices", "num_params", "feature_normalize")
# What a key absent from an older saved coordinator meant (files saved before the key existed).
SAVED_DEFAULTS = {"feature_normalize": "none"}
# The config key behind a metadata key, named in mismatch errors where they differ.
CONFIG_KEYS = {"feature_normalize": "coordinator.features.normalize"}


class CoordinatorMismatchError(TrinityError):
    """A saved coordinator does not fit the configured pool or backbone."""


class CoordinatorFileError(TrinityError):
    """A saved coordinator file is missing or unreadable."""


def save_params(path: str | os.PathLike[str], params: np.ndarray, metadata: dict[str, Any],
                extra_tensors: dict[str, np.ndarray] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, **metadata}
    text = json.dumps(meta, sort_keys=True)
    tensors = {"params": np.ascontiguousarray(params, dtype=np.float64)}
    for name, value in (extra_tensors or {}).items():
        if name == "params":
            raise ValueError("'params' is reserved for the parameter vector")
        tensors[name] = np.ascontiguousarray(value, dtype=np.float64)
    tmp = path.with_name(path.name + f".partial-{os.getpid()}")
    save_file(tensors, str(tmp), metadata={"trinity": text})
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path


def load_params(path: str | os.PathLike[str]) -> tuple[np.ndarray, dict[str, Any]]:
    params, meta, _ = load_saved(path)
    return params, meta


def _read_checked(path: str | os.PathLike[str], read_tensors: bool) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata of a saved coordinator (format checked) and, when asked, every tensor by name."""
    path = Path(path)
    if not path.is_file():
        raise CoordinatorFileError(f"no saved coordinator at {path}")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = json.loads((f.metadata() or {})["trinity"])
            tensors = ({name: f.get_tensor(name).astype(np.float64) for name in f.keys()}  # noqa: SIM118 (not iterable)
                       if read_tensors else {})
            if read_tensors and "params" not in tensors:
                raise KeyError("params")
    except Exception as e:
        raise CoordinatorFileError(f"{path} is not a saved coordinator: {e}") from None
    if meta.get("format") != FORMAT:
        raise CoordinatorFileError(f"{path} has format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta, tensors


def load_saved(path: str | os.PathLike[str]) -> tuple[np.ndarray, dict[str, Any], dict[str, np.ndarray]]:
    """(parameter vector, metadata, the extra tensors by name) of a saved coordinator."""
    meta, tensors = _read_checked(path, read_tensors=True)
    params = tensors.pop("params")
    return params, meta, tensors


def saved_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A saved coordinator's metadata, from the file's header only (no tensor)."""
    meta, _ = _read_checked(path, read_tensors=False)
    return meta


def saved_pool_models(path: str | os.PathLike[str]) -> list[str]:
    """The pool model names, in head order, a saved coordinator was trained for. Reads the file's header
    only (no tensor), so a server can refuse a coordinator before it loads or starts anything."""
    meta, _ = _read_checked(path, read_tensors=False)
    models = meta.get("pool_models")
    if not isinstance(models, list) or not models:
        raise CoordinatorFileError(f"{path} does not record the pool it was trained for (metadata 'pool_models')")
    return [str(m) for m in models]


def check_metadata(saved: dict[str, Any], expected: dict[str, Any], path: str | os.PathLike[str] = "") -> None:
    problems = []
    for key in CHECKED_KEYS:
        value = saved.get(key, SAVED_DEFAULTS.get(key))
        if key in expected and _norm(value) != _norm(expected[key]):
            name = f"{key} ({CONFIG_KEYS[key]})" if key in CONFIG_KEYS else key
            problems.append(f"{name}: saved {value!r}, configured {expected[key]!r}")
    if problems:
        raise CoordinatorMismatchError(
            f"the coordinator at {path} was saved for another setup and would mis-route: " + "; ".join(problems)
        )


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value))


def saved_feature_norm(meta: dict[str, Any], tensors: dict[str, np.ndarray], hidden_size: int,
                       path: str | os.PathLike[str] = "") -> FeatureNorm | None:
    """The feature statistics a saved coordinator was trained with (None when it reads raw features).

    A `standardize` coordinator must hold `feature_mean` and `feature_std` of shape (hidden_size,), and
    their digest must be the one its metadata records; otherwise it is refused, never routed with
    other statistics."""
    mode = meta.get("feature_normalize", SAVED_DEFAULTS["feature_normalize"])
    if mode not in ("standardize", "rebalance"):
        return None
    key = "feature_normalize (coordinator.features.normalize)"
    shapes = {name: tuple(tensors[name].shape) if name in tensors else None for name in ("feature_mean", "feature_std")}
    if any(shape != (int(hidden_size),) for shape in shapes.values()):
        raise CoordinatorMismatchError(
            f"the coordinator at {path} was saved with {key} = {mode!r} but its feature statistics are missing or "
            f"of the wrong shape: {shapes}, expected ({int(hidden_size)},) each")
    try:
        norm = FeatureNorm(tensors["feature_mean"], tensors["feature_std"],
                           count=int(meta.get("feature_norm_items", 0)),
                           shared_norm=float(meta.get("feature_norm_shared", 0.0) or 0.0),
                           basis=tensors.get("feature_basis"))
    except ValueError as e:
        raise CoordinatorMismatchError(f"the coordinator at {path}: {key} = {mode!r} with unusable statistics: "
                                       f"{e}") from None
    rank = meta.get("feature_norm_rank")
    if rank != norm.rank:
        raise CoordinatorMismatchError(f"the coordinator at {path}: its metadata records feature_norm_rank {rank!r} "
                                       f"but its tensors hold a basis of rank {norm.rank!r}")
    if (mode == "rebalance") != (norm.shared_norm > 0):
        raise CoordinatorMismatchError(f"the coordinator at {path}: {key} = {mode!r} but feature_norm_shared is "
                                       f"{norm.shared_norm}")
    recorded = meta.get("feature_norm_sha256")
    if recorded is not None and recorded != norm.digest:
        raise CoordinatorMismatchError(f"the coordinator at {path}: its feature statistics do not match the digest its "
                                       f"metadata records (feature_norm_sha256 {recorded!r}, tensors {norm.digest!r})")
    return norm


def coordinator_file(path: Path) -> Path:
    """A trained coordinator is a folder holding coordinator.safetensors (+ .json metadata); a file path is
    used as is."""
    path = Path(path)
    return path / "coordinator.safetensors" if path.suffix != ".safetensors" else path
