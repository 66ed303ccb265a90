"""Saved coordinators: the flat parameter vector in safetensors, with metadata that loading checks.

The metadata (JSON, stored in the safetensors header and copied next to the file for people) names the
backbone (id, revision), hidden size, pool model names in head order, the roles the head may pick
(`coordinator.roles`; the head always has the three role rows of ROLES), token position, SVF matrices
and parameter count. A coordinator saved for another pool or backbone is refused with a
CoordinatorMismatchError, never used to route silently to the wrong models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trinity.errors import TrinityError

FORMAT = "trinity-coordinator/1"
# Keys that must match exactly between a saved coordinator and the configuration loading it.
CHECKED_KEYS = ("backbone_id", "backbone_revision", "hidden_size", "pool_models", "roles", "token_position", "svf_matrices", "num_params")


class CoordinatorMismatchError(TrinityError):
    """A saved coordinator does not fit the configured pool or backbone."""


class CoordinatorFileError(TrinityError):
    """A saved coordinator file is missing or unreadable."""


def save_params(path: str | os.PathLike, params: np.ndarray, metadata: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, **metadata}
    text = json.dumps(meta, sort_keys=True)
    tmp = path.with_name(path.name + f".partial-{os.getpid()}")
    save_file({"params": torch.as_tensor(np.asarray(params, dtype=np.float64))}, str(tmp), metadata={"trinity": text})
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path


def load_params(path: str | os.PathLike) -> tuple[np.ndarray, dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise CoordinatorFileError(f"no saved coordinator at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {})["trinity"])
            params = f.get_tensor("params").numpy().astype(np.float64)
    except (KeyError, ValueError, OSError, Exception) as e:
        raise CoordinatorFileError(f"{path} is not a saved coordinator: {e}") from None
    if meta.get("format") != FORMAT:
        raise CoordinatorFileError(f"{path} has format {meta.get('format')!r}, expected {FORMAT!r}")
    return params, meta


def check_metadata(saved: dict[str, Any], expected: dict[str, Any], path: str | os.PathLike = "") -> None:
    problems = []
    for key in CHECKED_KEYS:
        if key in expected and _norm(saved.get(key)) != _norm(expected[key]):
            problems.append(f"{key}: saved {saved.get(key)!r}, configured {expected[key]!r}")
    if problems:
        raise CoordinatorMismatchError(
            f"the coordinator at {path} was saved for another setup and would mis-route: " + "; ".join(problems)
        )


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value))
