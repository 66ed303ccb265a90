"""`trinity eval` outside the pipeline: every argument checked before anything loads, and the results
written to a folder of the run's own, never into the evaluate stage's DVC outputs.

Checks, in order, each a ConfigError naming the argument: the coordinator (exists, is a saved
coordinator, was trained for this config's pool), the frontier when given (a frontier folder holding a
frontier, every head trained for this pool), the suites (known, prepared), the methods (known, their pool
models in the pool), the output folder (not inside a pipeline output, writable).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import yaml

from trinity.config_schema import TrinityConfig
from trinity.errors import ConfigError, TrinityError

if TYPE_CHECKING:
    from trinity.contracts import Router


@dataclass(frozen=True)
class EvalRequest:
    coordinator: Path              # the coordinator file (…/coordinator.safetensors)
    output: Path                   # the run's folder
    output_paths: dict[str, str]   # paths.<key> -> inside `output`
    frontier: Path | None = None   # a frontier folder (the frontier stage's): its budget table is reported


def pipeline_outputs(root: Path) -> list[Path]:
    """Every out, metric and plot path of every stage in root/dvc.yaml (absolute)."""
    dvc = root / "dvc.yaml"
    if not dvc.is_file():
        return []
    stages = (yaml.safe_load(dvc.read_text()) or {}).get("stages") or {}
    out = []
    for stage in stages.values():
        for key in ("outs", "metrics", "plots"):
            for entry in stage.get(key, []) or []:
                out.append((root / (next(iter(entry)) if isinstance(entry, dict) else entry)).resolve())
    return out


def check_coordinator(path: str | os.PathLike, pool_models: Sequence[str]) -> Path:
    from trinity.coordinator.saved import coordinator_file, saved_pool_models

    if not Path(path).exists():
        raise ConfigError(f"--coordinator {path}: no such file or folder")
    file = coordinator_file(Path(path))
    try:
        trained = saved_pool_models(file)
    except TrinityError as e:
        raise ConfigError(f"--coordinator {path}: {e}") from None
    if list(trained) != list(pool_models):
        raise ConfigError(f"--coordinator {path}: trained for pool {list(trained)}, but this config's pool is "
                          f"{list(pool_models)}; pass the pool it was trained on (pool=...)")
    return file


def check_suites(suites: Sequence[str], prepared: Path) -> None:
    from trinity.tasks.registry import suite_names

    known = suite_names()
    for suite in suites:
        if suite not in known:
            raise ConfigError(f"--suite {suite}: unknown suite; known: {', '.join(known)}")
        if not (prepared / f"{suite}.parquet").is_file():
            raise ConfigError(f"--suite {suite}: not prepared ({prepared / (suite + '.parquet')} is missing); "
                              f"add it to tasks.train or tasks.transfer and run `trinity run prepare`")


def check_methods(cfg: TrinityConfig, methods: Sequence[str], pool_models: Sequence[str], *, strict: bool) -> None:
    """Expanded by the method registry itself against this pool and the trained ablations on disk,
    before anything loads: an unknown method or pool model is an error, and so is, when `strict` (the
    user named it), a method that could not run (no trained ablations) where the stage would skip it.
    (The coordinator was checked before.)"""
    from trinity.eval.methods import MethodContext, MethodSkipped, expand_with_skips
    from trinity.pipeline.ablation_folders import ablation_names

    def present(name: str):
        if name not in ablation_names(cfg):
            raise MethodSkipped(f"no trained ablation '{name}' under {cfg.paths.ablations}")
        return SimpleNamespace(router=lambda: None, protocol=None, fingerprint="")

    # names only: no router is ever built from this context
    ctx = MethodContext(agents=list(pool_models), strongest=0, coordinator_router=lambda mode: cast("Router", None),
                        moa=cfg.eval.moa, ablation_names=lambda: ablation_names(cfg),
                        load_ablation=present)
    for name in methods:
        try:
            _, skipped = expand_with_skips([name], ctx)
        except ConfigError as e:
            raise ConfigError(f"--method {name}: {e}") from None
        if skipped and strict:
            raise ConfigError(f"--method {name}: cannot run: {skipped[0].reason}")


def check_frontier(path: str | os.PathLike, pool_models: Sequence[str]) -> Path:
    """A frontier folder that holds a frontier (the frontier stage ran with evolve.cost_weights) whose
    heads were trained for this config's pool."""
    from trinity.eval.frontier import load_table

    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"--frontier {path}: no such folder")
    try:
        manifest, table = load_table(folder)
    except ConfigError as e:
        raise ConfigError(f"--frontier {path}: {e}") from None
    if table is None:
        raise ConfigError(f"--frontier {path}: holds no frontier ({manifest.get('reason', 'the stage was off')})")
    for head in manifest.get("heads", []):
        check_coordinator(folder / str(head["path"]), pool_models)
    return folder


def check_output(output: Path, root: Path) -> None:
    target = output.resolve()
    for out in pipeline_outputs(root):
        if target == out or out in target.parents or target in out.parents:
            raise ConfigError(f"--output {output}: overlaps the pipeline's output {out.relative_to(root)}; "
                              f"only `dvc repro` writes there (pick another folder, or omit --output)")
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".trinity-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"--output {output}: cannot write there ({e.strerror or e})") from None


def prepare_request(cfg: TrinityConfig, *, coordinator: str, suites: Sequence[str], methods: Sequence[str],
                    output: str | None, root: Path, frontier: str | None = None) -> EvalRequest:
    """Check every argument, then make the run's folder (the only thing written before the run).
    `methods` are the ones the user named (strict); empty means the config's eval.methods."""
    from trinity.pipeline.workspace import new_run_folder, output_paths

    models = list(cfg.pool.models.keys())
    file = check_coordinator(coordinator, models)
    frontier_folder = check_frontier(frontier, models) if frontier is not None else None
    check_suites(suites or list(cfg.eval.suites or []), Path(cfg.paths.prepared))
    # methods the user named must run; the config's default list keeps the stage's skip list
    check_methods(cfg, methods or list(cfg.eval.methods), models, strict=bool(methods))
    if output is not None:
        check_output(Path(output), root)
        folder = Path(output)
    else:
        folder = new_run_folder(cfg.paths.ad_hoc_runs, "eval")
    return EvalRequest(coordinator=file, output=folder, output_paths=output_paths(cfg, ("evaluate",), folder),
                       frontier=frontier_folder)
