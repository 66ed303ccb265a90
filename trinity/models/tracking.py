"""The registry as a DVC-tracked folder of the repository: after every change (a retraining run's
decision, `trinity models promote | rollback`) `dvc add <registry>` records the folder's new content in
`<registry>.dvc` and the DVC cache. Committing that small file versions the champion with the code, so
`git checkout <commit>` + `dvc checkout <registry>.dvc` brings back that commit's registry and champion.

Tracking is best effort by design: the registry itself is already written (atomically) when this runs,
so a missing DVC repository or a failed `dvc add` is a warning naming what to do, never an error that
would make a finished retraining run look failed. `retrain.dvc_track` (or `--no-dvc-track`) turns it
off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("trinity.models")


@dataclass(frozen=True)
class Tracked:
    dvc_file: Path | None     # <registry>.dvc when `dvc add` ran; None when it did not
    message: str              # what happened, for the log and the retraining report


def dvc_repo_root(start: str | os.PathLike) -> Path | None:
    """The nearest folder at or above `start` that holds a `.dvc` directory (a DVC repository)."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / ".dvc").is_dir():
            return folder
    return None


def track(registry_root: str | os.PathLike, *, timeout_s: float = 300) -> Tracked:
    """`dvc add` the registry folder in its DVC repository; see the module docstring."""
    root = Path(registry_root).resolve()
    if not (root / "registry.json").is_file():
        return Tracked(None, f"nothing to track: {root} has no registry.json")
    repo = dvc_repo_root(root.parent)
    if repo is None:
        return Tracked(None, f"{root} is not inside a DVC repository: not versioned (run `dvc init` and "
                             f"`dvc add {root.name}` to version it)")
    rel = root.relative_to(repo)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    cmd = [sys.executable, "-m", "dvc", "add", "-q", str(rel)]
    try:
        done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _failed(rel, str(e))
    if done.returncode != 0:
        return _failed(rel, (done.stderr or done.stdout).strip()[-500:])
    dvc_file = repo / f"{rel}.dvc"
    return Tracked(dvc_file, f"registry versioned: `dvc add {rel}` updated {dvc_file.relative_to(repo)} "
                             f"(commit it with git; `dvc push` shares the versions)")


def _failed(rel: Path, why: str) -> Tracked:
    message = f"`dvc add {rel}` failed, so this registry change is not versioned yet: {why}"
    log.warning(message)
    return Tracked(None, message)
