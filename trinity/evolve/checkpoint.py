"""Checkpoints: one file per run folder, written atomically after every generation.

Format: a magic line, the SHA-256 of the body, then the pickled payload. A torn or edited file fails
the checksum and a checkpoint from another configuration fails the fingerprint: both are a clear
CheckpointError instead of a silently different run. The file is pickle, so only load run folders
you wrote yourself. The payload is the evolution state; the episode rows live in Parquet parts beside
it, referenced by name, row count and SHA-256 (trinity.evolve.episode_parts), so the file stays about
the same size however many generations the run has.

No global random state is saved, because the run draws from none: the strategy's own random stream is
part of its state (trinity.evolve.strategies; pycma, whose `seed` option would seed numpy's global
generator, is given no seed and samples only from the stream the state lends it), and every episode's
randomness is derived from the root seed and the episode's identity (trinity.seeding). A checkpoint an
older loop wrote with the global generators' states in it ("rng") loads as before; that entry is ignored.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from trinity.evolve.errors import CheckpointError
from trinity.files import atomic_write_bytes  # noqa: F401 (the evolve modules import it from here)

MAGIC = b"TRINITY-EVOLVE-CHECKPOINT v1\n"
RESUME_HINT = "delete the run folder or start over with evolve.resume=false (run_evolution(..., fresh=True))"
def library_versions() -> dict[str, str]:
    """The versions whose classes a checkpoint pickles (the strategy's state is a pycma object)."""
    import importlib.metadata as md

    out = {"python": ".".join(map(str, sys.version_info[:3])), "numpy": np.__version__}
    try:
        out["cma"] = md.version("cma")
    except md.PackageNotFoundError:
        out["cma"] = "absent"
    return out


def _versions_text(v: dict[str, str]) -> str:
    return ", ".join(f"{k} {v[k]}" for k in sorted(v))


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """MAGIC, then one header line (the body's sha256 and the library versions as JSON), then the pickle:
    the versions are readable even when the pickle no longer is."""
    body = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    header = hashlib.sha256(body).hexdigest() + " " + json.dumps(library_versions(), sort_keys=True)
    atomic_write_bytes(path, MAGIC + header.encode() + b"\n" + body)


def load_checkpoint(path: Path, fingerprint: str) -> dict[str, Any]:
    path = Path(path)
    hint = RESUME_HINT
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"checkpoint {path} is corrupt (not a trinity evolution checkpoint); {hint}")
    header, _, body = data[len(MAGIC):].partition(b"\n")
    digest, _, versions_json = header.partition(b" ")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupt (checksum mismatch, a torn or edited file); {hint}")
    try:
        written = json.loads(versions_json) if versions_json else {}
    except ValueError:
        written = {}
    now = library_versions()
    changed = {k: (written[k], now.get(k, "absent")) for k in written if written[k] != now.get(k, "absent")}
    try:
        payload = pickle.loads(body)
    except Exception as e:  # unpickling raises many types
        if changed:
            was = ", ".join(f"{k} {a}" for k, (a, _) in sorted(changed.items()))
            is_ = ", ".join(f"{k} {b}" for k, (_, b) in sorted(changed.items()))
            raise CheckpointError(
                f"checkpoint {path} was written with {was} and cannot be read with {is_} "
                f"({type(e).__name__}: {e}); reinstall {was.replace(' ', '==')} to resume it, or {hint}") from None
        raise CheckpointError(f"checkpoint {path} is corrupt ({type(e).__name__}: {e}); {hint}") from None
    if changed:
        import logging

        logging.getLogger("trinity.evolve").warning(
            "checkpoint %s was written with %s; resuming it with %s", path, _versions_text(written),
            _versions_text(now))
    if payload.get("fingerprint") != fingerprint:
        raise CheckpointError(
            f"checkpoint {path} was written by a different configuration (fingerprint "
            f"{payload.get('fingerprint')} != {fingerprint}: the evolve/protocol/pool/coordinator/tasks config, "
            f"the seed or the number of parameters changed); {hint}"
        )
    return payload
