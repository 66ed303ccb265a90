"""Coordinator states shipped with a recording: per recorded item, the backbone features of every transcript
the coordinator reads on that item's tree, so the cache_states stage of a run on the recording reads them
instead of running the backbone (`trinity record --states` writes them; trinity.pipeline.record_states).

    <recording>/states/<digest>/identity.json            what computed them (below); <digest> names it
    <recording>/states/<digest>/<part stem>.safetensors  one item: a tensor `at<position>` (n, d) float32 per
                                                         token position, one row per distinct transcript, rows in
                                                         the order of the file's `tokens` metadata
    <recording>/states/<digest>/index.json               uid -> file, SHA-256, positions, rows

The identity is the backbone (id, revision, hidden size, dtype) and the feature engine's batching settings
(prefix reuse budget, max_batch, max_padding): what decides the bytes besides the prompts. A row is matched
by the SHA-256 of its transcript's token ids (the rendered coordinator prompt), so another protocol, pool
size or coordinator prompt matches nothing and is computed. An item is used whole or not at all: its file
must hold exactly the transcripts the run asks for, at every token position it asks for.

The stage computes a recorded item the same way (that item's transcripts alone, isolated:
trinity.pipeline.state_files.features_at_positions), so a shipped item holds the bytes the stage would
compute on the pinned numerics path (trinity.pin_numerics); on another CPU it still reads these bytes, which
keeps a run's outputs the same across machines.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trinity.errors import TrinityError
from trinity.files import atomic_write_bytes, sha256_file

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Coordinator

FOLDER = "states"
IDENTITY = "identity.json"
INDEX = "index.json"
FORMAT = "trinity-shipped-states"
VERSION = 1


class ShippedStatesError(TrinityError):
    """Shipped states that cannot be used: a file missing, changed or unreadable."""


def states_identity(coord: Coordinator) -> dict[str, Any]:
    """What, besides the prompts, decides a state's bytes: the backbone and the feature engine's batching."""
    backbone, engine = coord.backbone, coord.engine
    ident = {k: v for k, v in coord.state_identity().items() if k != "token_position"}
    return {"format": FORMAT, "version": VERSION, **ident, "dtype": str(backbone.dtype),
            "prefix_tokens": 0 if engine.prefix_store is None else int(engine.prefix_store.max_tokens),
            "max_batch": int(engine.max_batch), "max_padding": engine.max_padding}


def states_digest(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def token_digest(coord: Coordinator, text: str) -> str:
    """The SHA-256 of a transcript's token ids as the coordinator renders it (no namespace: one row serves
    every token position)."""
    return hashlib.sha256(np.asarray(coord.engine.tokens(text), dtype=np.int64).tobytes()).hexdigest()


def tensor_name(position: int) -> str:
    return f"at{int(position)}"


class ShippedStates:
    """The shipped states of one recording for one coordinator identity (folder `states/<digest>`)."""

    def __init__(self, recording: str | os.PathLike, coord: Coordinator):
        self.coord = coord
        self.identity = states_identity(coord)
        self.folder = Path(recording) / FOLDER / states_digest(self.identity)
        self._index: dict[str, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ reading
    @property
    def index(self) -> dict[str, dict[str, Any]]:
        if self._index is None:
            self._index = self._read_index()
        return self._index

    def _read_index(self) -> dict[str, dict[str, Any]]:
        path = self.folder / INDEX
        if not path.exists():
            return {}
        try:
            index = json.loads(path.read_text())
            saved = json.loads((self.folder / IDENTITY).read_text())
        except (OSError, ValueError) as e:
            raise ShippedStatesError(f"shipped states {self.folder} are damaged: {e}; delete the folder and run "
                                     f"`trinity record --states` again to rebuild them") from None
        if _plain(saved) != _plain(self.identity):
            raise ShippedStatesError(f"shipped states {self.folder}: {IDENTITY} does not match the folder's name "
                                     f"(edited by hand?); delete the folder and run `trinity record --states` again")
        items = index.get("items") if isinstance(index, dict) else None
        if not isinstance(items, dict):
            raise ShippedStatesError(f"shipped states {path} has no `items` table")
        return items

    def get(self, uid: str, texts: Sequence[str], positions: Sequence[int]) -> dict[int, dict[str, np.ndarray]] | None:
        """{position: {text: feature}} of one item when its shipped file holds exactly these transcripts at
        every position asked for; None when the item has none or another set (computed then)."""
        entry = self.index.get(uid)
        if entry is None or any(tensor_name(p) not in entry.get("positions", []) for p in positions):
            return None
        wanted = {token_digest(self.coord, t): t for t in dict.fromkeys(texts)}
        tokens, tensors = self._read_item(uid, entry, positions)
        if set(tokens) != set(wanted) or len(tokens) != len(wanted):
            return None
        return {int(p): {wanted[d]: tensors[tensor_name(p)][row] for row, d in enumerate(tokens)} for p in positions}

    def _read_item(self, uid: str, entry: Mapping[str, Any],
                   positions: Sequence[int]) -> tuple[list[str], dict[str, np.ndarray]]:
        path = self.folder / str(entry.get("file", ""))
        if not path.is_file():
            raise ShippedStatesError(f"shipped states {self.folder}: the file of item {uid} ({entry.get('file')}) is "
                                     f"missing; run `trinity record --states` to write it again")
        if sha256_file(path) != entry.get("sha256"):
            raise ShippedStatesError(f"shipped states {path} (item {uid}) do not match their SHA-256 in {INDEX} "
                                     f"(changed or truncated); delete the file and run `trinity record --states`")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {})["tokens"])
                tensors = {tensor_name(p): f.get_tensor(tensor_name(p)).numpy() for p in positions}
        except Exception as e:   # a file that passed its checksum but is not what the index says
            raise ShippedStatesError(f"shipped states {path} (item {uid}) are unreadable: {e}") from None
        hidden = int(self.identity["hidden_size"])
        for name, block in tensors.items():
            if block.shape != (len(meta), hidden) or block.dtype != np.float32:
                raise ShippedStatesError(f"shipped states {path} (item {uid}): tensor {name} is {tuple(block.shape)} "
                                         f"{block.dtype}, expected ({len(meta)}, {hidden}) float32")
        return list(meta), tensors

    # ------------------------------------------------------------------ writing
    def put(self, uid: str, stem: str, features: Mapping[int, Mapping[str, np.ndarray]]) -> Path:
        """Write one item's {position: {text: feature}} as `<stem>.safetensors` and enter it in the index."""
        positions = list(features)
        texts = sorted(features[positions[0]]) if positions else []
        if any(sorted(features[p]) != texts for p in positions):
            raise ValueError(f"item {uid}: every position needs the same transcripts")
        self.folder.mkdir(parents=True, exist_ok=True)
        ident = self.folder / IDENTITY
        if not ident.exists():
            atomic_write_bytes(ident, (json.dumps(self.identity, indent=1, default=str) + "\n").encode())
        path = self.folder / f"{stem}.safetensors"
        tmp = path.with_name(path.name + f".partial-{os.getpid()}")

        def stacked(p: int) -> np.ndarray:
            if not texts:
                return np.zeros((0, int(self.identity["hidden_size"])), np.float32)
            return np.stack([np.asarray(features[p][t], dtype=np.float32) for t in texts])
        tensors = {tensor_name(p): torch.as_tensor(stacked(p)) for p in positions}
        save_file(tensors, str(tmp),
                  metadata={"uid": uid, "tokens": json.dumps([token_digest(self.coord, t) for t in texts])})
        os.replace(tmp, path)
        self.index[uid] = {"file": path.name, "sha256": sha256_file(path), "positions": sorted(tensors),
                           "rows": len(texts)}
        self._write_index()
        return path

    def _write_index(self) -> None:
        blob = {"format": FORMAT, "version": VERSION, "identity": self.identity,
                "items": dict(sorted(self.index.items()))}
        atomic_write_bytes(self.folder / INDEX, (json.dumps(blob, indent=1, default=str) + "\n").encode())


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
