"""The cache_states stage's files: first-turn features of every prepared question, one safetensors file
per suite.

`<out>.safetensors` holds `features` (n, d) float32 in item order; `<out>.json` (next to it) holds the
uids in the same order, the content-cache keys and the backbone identity, so a later run can preload
the features into its cache (`preload_state_cache`) instead of recomputing them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trinity.coordinator.saved import check_metadata
from trinity.files import sha256_file

if TYPE_CHECKING:
    # Only for annotations: reading a state file needs no backbone, and the coordinator's own
    # feature_norm.py reads these files.
    from trinity.coordinator.coordinator import Coordinator


# Prompts per precompute call: progress news, with the same slices on every run. Each slice is computed
# isolated (no content-cache reads, an empty prefix store): its batches are its prompts sorted by token
# length and cut by max_batch / max_padding, so the bytes depend on the prompts, never on timing, on
# concurrent work or on what an earlier run left in the feature cache.
STATE_SLICE = 64


def state_path(states_dir: str | os.PathLike, name: str, position: int | None = None) -> Path:
    """The one naming rule of state files: `<name>.safetensors` at the coordinator's own token position
    (`position` None), `<name>@<position>.safetensors` at another position that an ablation reads."""
    return Path(states_dir) / (f"{name}.safetensors" if position is None else f"{name}@{position}.safetensors")


def write_state_cache(coord: Coordinator, items: Sequence[tuple[str, str]], out_path: str | os.PathLike,
                      progress: Callable[[int], None] | None = None) -> Path:
    """Features of (uid, transcript) pairs at `coord`'s token position into `out_path` (+ a JSON index); returns
    the path. The cache_states stage's own computation (`features_at_positions`, then `save_state_cache`) for
    one set of prompts and one position. `progress(n)` after each slice of n prompts."""
    position = coord.token_position
    computed = features_at_positions(coord, [text for _, text in items], [position], progress)[position]
    return save_state_cache(coord, items, rows(computed, items, coord.hidden_size), out_path)


def rows(by_text: dict[str, np.ndarray], items: Sequence[tuple[str, str]], hidden: int) -> np.ndarray:
    """The features of (uid, transcript) pairs in their order, from {transcript: feature}."""
    return np.stack([by_text[t] for _, t in items]) if items else np.zeros((0, hidden), dtype=np.float32)


def features_at_positions(coord: Coordinator, texts: Sequence[str], positions: Sequence[int],
                          progress: Callable[[int], None] | None = None) -> dict[int, dict[str, np.ndarray]]:
    """{position: {text: feature}} of distinct prompts at several token positions, one forward pass per prompt.
    The prompts go in sorted order, so the turns of one task (which extend its first turn) share a slice and
    reuse its prefix; each slice is computed isolated, so the bytes depend only on the prompts and positions."""
    ordered = sorted(set(texts))
    out: dict[int, dict[str, np.ndarray]] = {int(p): {} for p in positions}
    for start in range(0, len(ordered), STATE_SLICE):
        part = ordered[start:start + STATE_SLICE]
        for position, features in coord.engine.features_at(part, list(out)).items():
            out[position].update(zip(part, features, strict=True))
        if progress is not None:
            progress(len(part))
    return out


def save_state_cache(coord: Coordinator, items: Sequence[tuple[str, str]], features: np.ndarray,
                     out_path: str | os.PathLike) -> Path:
    """Write features of (uid, transcript) pairs, computed as `coord` reads them (its token position), into
    `out_path` (+ a JSON index with the content-cache keys in `coord`'s namespace); returns the path."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    uids = [uid for uid, _ in items]
    if len(set(uids)) != len(uids):
        raise ValueError("write_state_cache: uids must be unique")
    keys = [coord.cache.key(coord.engine.tokens(text), None) for _, text in items]
    meta = coord.state_identity()
    tmp = out_path.with_name(out_path.name + f".partial-{os.getpid()}")
    save_file({"features": torch.as_tensor(np.asarray(features, dtype=np.float32))}, str(tmp),
              metadata={"trinity": json.dumps(meta)})
    os.replace(tmp, out_path)
    index = {**meta, "count": len(uids), "uids": uids, "cache_keys": keys,
             "inputs_sha256": state_inputs_sha256(coord, uids, keys), "sha256": sha256_file(out_path)}
    out_path.with_suffix(".json").write_text(json.dumps(index, indent=1) + "\n")
    return out_path


def state_inputs_sha256(coord: Coordinator, uids: Sequence[str], keys: Sequence[str]) -> str:
    """What decides a suite's state bytes: the backbone identity, its dtype and device class, and the
    token sequences in order (their cache keys). Equal for two runs means the same file can be reused."""
    import hashlib

    facts = {**coord.state_identity(), "dtype": str(coord.backbone.dtype), "device": coord.backbone.device.type,
             "uids": list(uids), "cache_keys": list(keys)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def reuse_state_cache(coord: Coordinator, items: Sequence[tuple[str, str]], out_path: str | os.PathLike,
                      reuse_from: Sequence[str | os.PathLike]) -> Path | None:
    """Copy an earlier run's state file of the same suite into `out_path` when it was computed from the
    same inputs (state_inputs_sha256) and is still the file its index describes; None when none is.
    Tokenising the prompts is all it costs, not a forward pass."""
    import shutil

    out_path = Path(out_path)
    uids = [uid for uid, _ in items]
    keys = [coord.cache.key(coord.engine.tokens(text), None) for _, text in items]
    wanted = state_inputs_sha256(coord, uids, keys)
    for folder in reuse_from:
        earlier = Path(folder) / out_path.name
        try:
            index = json.loads(earlier.with_suffix(".json").read_text())
        except (OSError, ValueError):
            continue
        if index.get("inputs_sha256") != wanted or not earlier.is_file() or index.get("sha256") != sha256_file(earlier):
            continue
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if earlier.resolve() != out_path.resolve():
            shutil.copyfile(earlier, out_path)
            out_path.with_suffix(".json").write_text(json.dumps(index, indent=1) + "\n")
        return Path(folder)
    return None


def read_state_cache(path: str | os.PathLike) -> tuple[list[str], np.ndarray, dict]:
    path = Path(path)
    index = json.loads(path.with_suffix(".json").read_text())
    with safe_open(str(path), framework="pt") as f:
        features = f.get_tensor("features").numpy()
    return index["uids"], features, index


def first_turn_states(states_dir: str | os.PathLike, suites: Sequence[str]) -> dict[str, np.ndarray]:
    """{item uid: first-turn feature} of the suites whose state file the cache_states stage wrote (a suite
    without one is left out)."""
    out: dict[str, np.ndarray] = {}
    for suite in suites:
        path = state_path(states_dir, suite)
        if path.is_file():
            uids, features, _ = read_state_cache(path)
            out.update(zip(uids, features, strict=True))
    return out


def preload_state_cache(coord: Coordinator, path: str | os.PathLike) -> int:
    """Put a state cache's features into the coordinator's feature cache, pinned (an isolated computation
    reads them: their bytes depend only on their prompts); returns how many."""
    uids, features, index = read_state_cache(path)
    check_metadata(index, coord.state_identity(), path)
    coord.cache.pin_many(list(zip(index["cache_keys"], features, strict=True)))
    return len(uids)
