"""`trinity run`: the pipeline (or chosen stages) through `dvc repro`, with this environment's Python.

The stages' commands say `python -m flows.<stage>`, so DVC must find the interpreter that has trinity
installed: the folder of the running interpreter goes first on PATH. The composed config is written to
params.yaml only when it changed, so an unchanged config leaves DVC's params untouched and `dvc repro`
skips what is up to date.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from trinity.errors import ConfigError, TrinityError


def project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: cwd) holding dvc.yaml."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "dvc.yaml").is_file():
            return folder
    raise TrinityError(f"no dvc.yaml in {here} or above: run `trinity run` inside the project")


def stage_names(root: Path) -> list[str]:
    data = yaml.safe_load((root / "dvc.yaml").read_text()) or {}
    return list((data.get("stages") or {}).keys())


def split_targets(words: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    """Stage names and Hydra overrides (anything with '='), each in the order given."""
    stages = [w for w in words if "=" not in w]
    overrides = [w for w in words if "=" in w]
    unknown = [s for s in stages if s not in known]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; the pipeline's stages are {known} "
                          "(overrides need '=': key=value)")
    return stages, overrides


def write_params(text: str, path: Path) -> bool:
    """Write params.yaml when its content differs; True when it was written."""
    if path.is_file() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def dvc_executable() -> list[str]:
    beside = Path(sys.executable).parent / "dvc"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("dvc")
    if found:
        return [found]
    raise TrinityError("dvc is not installed in this environment: run `make setup`")


def repro_command(stages: list[str], *, force: bool = False, dry: bool = False) -> list[str]:
    cmd = [*dvc_executable(), "repro"]
    if force:
        cmd.append("--force")
    if dry:
        cmd.append("--dry")
    return cmd + stages


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(words: list[str], *, force: bool = False, dry: bool = False, root: Path | None = None) -> int:
    from trinity import config

    root = root or project_root()
    stages, overrides = split_targets(words, stage_names(root))
    cfg = config.compose(overrides)      # a bad override stops here, before params.yaml is touched
    config.check_api_keys(cfg)
    changed = write_params(config.to_yaml(cfg), root / "params.yaml")
    print(f"params.yaml {'updated' if changed else 'unchanged'}; running: "
          f"dvc repro{' --force' if force else ''}{' --dry' if dry else ''} {' '.join(stages)}".rstrip(),
          flush=True)
    return subprocess.call(repro_command(stages, force=force, dry=dry), cwd=root, env=environment())
