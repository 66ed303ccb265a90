"""Episode parts: each committed step's episode rows in their own Parquet file, written once.

A run folder holds `episodes/x0.parquet` (x0's validation, generation -1) and `episodes/gen-0003.parquet`
(generation 3's training and validation rows). A part is written atomically when its step finishes and
before the checkpoint that references it; the checkpoint keeps only a reference (file name, row count,
SHA-256 of the bytes), so it stays about the same size however long the run gets, while the rows are
written once instead of re-pickled every generation.

A part the checkpoint does not reference belongs to a step the run did not commit (killed between the
part and the checkpoint, or a run started over): it is removed, and the step that wrote it runs again.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from trinity.evolve.checkpoint import RESUME_HINT, atomic_write_bytes
from trinity.evolve.errors import CheckpointError

X0_PART = "x0.parquet"
PART_GLOB = "*.parquet"
TEMP_GLOB = ".*.tmp"  # atomic_write_bytes' temp files that a SIGKILL left behind


@dataclass(frozen=True)
class PartRef:
    """The checkpoint's reference to one step's part (a dict of these fields in the checkpoint)."""

    file: str
    generation: int      # -1: x0
    rows: int
    sha256: str          # of the file's bytes


def part_name(generation: int) -> str:
    return X0_PART if generation < 0 else f"gen-{generation:04d}.parquet"


def write_part(folder: Path, generation: int, frame: pl.DataFrame) -> PartRef:
    """Write one step's rows; returns the checkpoint's reference to them."""
    buf = io.BytesIO()
    frame.write_parquet(buf)
    data = buf.getvalue()
    name = part_name(generation)
    atomic_write_bytes(Path(folder) / name, data)
    return PartRef(name, generation, frame.height, hashlib.sha256(data).hexdigest())


def read_parts(folder: Path, refs: Sequence[PartRef], checkpoint: Path) -> list[pl.DataFrame]:
    """The referenced parts, each checked against its reference: a missing, swapped, torn or edited part is
    a CheckpointError naming the file, never a silently different table."""
    frames = []
    for ref in refs:
        path = Path(folder) / ref.file
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CheckpointError(f"episode part {path}, referenced by checkpoint {checkpoint}, cannot be read "
                                  f"({e}); {RESUME_HINT}") from None
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise CheckpointError(f"episode part {path} does not match checkpoint {checkpoint} (checksum mismatch: "
                                  f"a swapped, torn or edited file); {RESUME_HINT}")
        frame = pl.read_parquet(io.BytesIO(data))
        if frame.height != ref.rows:
            raise CheckpointError(f"episode part {path} has {frame.height} rows, checkpoint {checkpoint} expects "
                                  f"{ref.rows}; {RESUME_HINT}")
        frames.append(frame)
    return frames


def prune_parts(folder: Path, refs: Sequence[PartRef]) -> list[str]:
    """Remove the parts (and temp files) no reference names; returns the removed names."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    keep = {ref.file for ref in refs}
    removed = []
    for path in sorted([*folder.glob(PART_GLOB), *folder.glob(TEMP_GLOB)]):
        if path.name not in keep:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed
