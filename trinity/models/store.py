"""The model registry: every trained coordinator kept under a version, and which one is the champion.

Layout of a registry folder (`paths.registry`, default `models/`; versioned with `dvc add models`, apart
from the pipeline's stage outputs, so `git checkout <commit>` + `dvc checkout` brings that champion back):

    registry.json                       {"format", "champion", "versions": [...], "history": [...]}
    versions/<vN>/coordinator.safetensors  (+ coordinator.json, the saved coordinator's metadata for people)
    versions/<vN>/meta.json             created time, source run, pool, backbone, metrics, sha256 of the
                                        data manifest, of the config and of the coordinator, parent version

Writes are atomic and ordered so that an interrupted one never changes the champion: a version folder is
written in full under a temporary name and renamed into `versions/` (a rename is atomic), and only then
does registry.json (written to a temporary file, fsynced, renamed) name it. A folder in `versions/` that
registry.json does not name is a write that never finished: it is ignored, and the next register
skips its number. Concurrent writers (a retraining run and `trinity models promote`) take a lock file.

History entries: {"at", "action": register | promote | keep | rollback, "version", "previous" (the
champion before), "reason"}. `rollback` makes the champion the one that preceded the current champion's
latest promotion.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.errors import TrinityError
from trinity.files import atomic_write_bytes, sha256_file

FORMAT = "trinity-registry/1"
REGISTRY_FILE = "registry.json"
COORDINATOR_FILE = "coordinator.safetensors"
META_FILE = "meta.json"
_VERSION = re.compile(r"^v(\d+)$")


class ModelRegistryError(TrinityError):
    """A registry operation that cannot be done (unknown version, nothing to roll back to, bad file)."""


@dataclass(frozen=True)
class Version:
    name: str
    folder: Path
    meta: dict[str, Any]

    @property
    def coordinator(self) -> Path:
        return self.folder / COORDINATOR_FILE


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class ModelRegistry:
    """One registry folder. Every method re-reads registry.json: another process may have changed it."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def file(self) -> Path:
        return self.root / REGISTRY_FILE

    @property
    def versions_dir(self) -> Path:
        return self.root / "versions"

    # ------------------------------------------------------------------------------------------ reading
    def state(self) -> dict[str, Any]:
        """registry.json's content; an empty registry when the file does not exist yet."""
        if not self.file.is_file():
            return {"format": FORMAT, "champion": None, "versions": [], "history": []}
        try:
            state = json.loads(self.file.read_text())
        except ValueError as e:
            raise ModelRegistryError(f"{self.file} is not valid JSON: {e}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ModelRegistryError(f"{self.file} is not a trinity model registry (format {FORMAT!r})")
        return state

    def champion_name(self) -> str | None:
        return self.state().get("champion")

    def champion(self) -> Version | None:
        name = self.champion_name()
        return self.show(name) if name else None

    def list(self) -> list[Version]:
        """The registered versions, oldest first."""
        return [self.show(name) for name in self.state()["versions"]]

    def show(self, name: str) -> Version:
        name = self._name(name)
        if name not in self.state()["versions"]:
            known = ", ".join(self.state()["versions"]) or "none"
            raise ModelRegistryError(f"no version {name!r} in the registry at {self.root} (versions: {known})")
        folder = self.versions_dir / name
        try:
            meta = json.loads((folder / META_FILE).read_text())
        except (OSError, ValueError) as e:
            raise ModelRegistryError(f"version {name} at {folder} has no readable {META_FILE}: {e}") from None
        return Version(name, folder, meta)

    def history(self) -> builtins.list[dict[str, Any]]:  # `list` is the method above here
        return list(self.state()["history"])

    # ------------------------------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The state under an exclusive lock; the caller changes it in place, and it is written on exit."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.state()
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                atomic_write_bytes(self.file, (json.dumps(state, indent=2) + "\n").encode())

    def register(self, coordinator: str | os.PathLike, meta: dict[str, Any] | None = None) -> Version:
        """Copy a trained coordinator (its .safetensors file, or a folder holding coordinator.safetensors)
        into a new version with `meta` (plus created time and the file's sha256); it is not the champion
        until promoted. Returns the version."""
        source = Path(coordinator)
        if source.is_dir():
            source = source / COORDINATOR_FILE
        if not source.is_file():
            raise ModelRegistryError(f"no trained coordinator at {coordinator}")
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root))
        try:
            shutil.copy2(source, staging / COORDINATOR_FILE)
            beside = source.with_suffix(".json")
            if beside.is_file():
                shutil.copy2(beside, staging / "coordinator.json")
            full = {**(meta or {}), "created": now(), "coordinator_sha256": sha256_file(staging / COORDINATOR_FILE)}
            with self._locked() as state:
                name = f"v{self._next_number()}"
                full["version"] = name
                (staging / META_FILE).write_text(json.dumps(full, indent=2, sort_keys=True, default=str) + "\n")
                for path in staging.iterdir():
                    with open(path, "rb") as f:
                        os.fsync(f.fileno())
                os.rename(staging, self.versions_dir / name)   # the folder is complete before anything names it
                state["versions"].append(name)
                state["history"].append({"at": full["created"], "action": "register", "version": name,
                                         "previous": state["champion"], "reason": full.get("source_run")})
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return self.show(name)

    def _next_number(self) -> int:
        """One past every number used, folders of unfinished writes included (never reused)."""
        used = [int(m.group(1)) for p in self.versions_dir.iterdir() if (m := _VERSION.match(p.name))]
        return max(used, default=0) + 1

    def promote(self, name: str, reason: str) -> Version:
        """Make `name` the champion, recording why."""
        version = self.show(name)
        with self._locked() as state:
            state["history"].append({"at": now(), "action": "promote", "version": version.name,
                                     "previous": state["champion"], "reason": reason})
            state["champion"] = version.name
        return version

    def keep(self, challenger: str, reason: str) -> None:
        """Record that `challenger` did not replace the champion, and why; the champion stays."""
        self.show(challenger)
        with self._locked() as state:
            state["history"].append({"at": now(), "action": "keep", "version": challenger,
                                     "previous": state["champion"], "reason": reason})

    def rollback(self, reason: str = "rollback") -> Version:
        """Make the champion the version that preceded the current champion's latest promotion."""
        with self._locked() as state:
            current = state["champion"]
            if current is None:
                raise ModelRegistryError(f"the registry at {self.root} has no champion to roll back")
            promotion = next((h for h in reversed(state["history"])
                              if h["action"] == "promote" and h["version"] == current), None)
            previous = promotion.get("previous") if promotion else None
            if previous is None:
                raise ModelRegistryError(f"{current} is the first champion of the registry at {self.root}: "
                                    "there is no earlier champion to roll back to")
            state["history"].append({"at": now(), "action": "rollback", "version": previous,
                                     "previous": current, "reason": reason})
            state["champion"] = previous
        return self.show(previous)

    @staticmethod
    def _name(name: str | int) -> str:
        text = str(name)
        return f"v{text}" if text.isdigit() else text
