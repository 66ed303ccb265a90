"""Train a list of config variants at the main run's budget, one after the other: the one loop the ablate
stage (one variant per ablation) and the frontier stage (one per cost weight) share.

Each variant evolves in its own run folder (resuming from its checkpoint), with its own backbone and pool
client closed before the next starts; a replay miss stops the stage; the variant's coordinator, tables,
summary and plots are published to `<dest>/<name>`, its run facts to `paths.timings/<timings>/<name>`."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity.config import mapping_yaml
from trinity.config_schema import TrinityConfig
from trinity.pipeline import evolve_stage
from trinity.pipeline.population import Submit
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.workspace import timings_dir

Chosen = Mapping[str, tuple[dict[str, Any], TrinityConfig]]   # name -> (overrides, the variant's typed config)
Describe = Callable[[str, dict[str, Any], TrinityConfig], str]


@dataclass(frozen=True)
class TrainedVariant:
    name: str
    overrides: dict[str, Any]
    config: TrinityConfig
    out: dict[str, Any]          # evolve_stage.evolve's return: run_dir, result (EvolutionResult), ...
    published: Path              # <dest>/<name>
    timings: Path                # its run facts' folder
    wall_s: float


def train_variants(cfg: TrinityConfig, chosen: Chosen, dest: Path, *, stage: str, label: str, timings: str,
                   submit: Submit, progress: Callable[[dict], None] | None,
                   evolve: Callable[..., dict] | None, log: logging.Logger,
                   describe: Describe | None = None) -> Iterator[TrainedVariant]:
    """Evolve each variant of `chosen` in turn and publish it; yields each as it finishes, so the caller
    writes its summary after every variant. `stage` names the stage in errors, `label` prefixes progress
    lines ("<label> i/n <name>: ..."), `timings` is the run-facts folder under paths.timings."""
    evolve = evolve or evolve_stage.evolve
    for i, (name, (overrides, variant)) in enumerate(chosen.items(), start=1):
        prefix = f"{label} {i}/{len(chosen)} {name}"
        log.info("%s: %s", prefix, describe(name, overrides, variant) if describe is not None
                 else ", ".join(f"{k}={v}" for k, v in overrides.items()))
        started = time.perf_counter()

        def on_progress(info: dict, name: str = name, prefix: str = prefix, index: int = i) -> None:
            info = {**info, "variant": name, "variant_index": index, "variants": len(chosen),
                    "line": f"{prefix}: {info.get('line', '')}"}
            log.info(info["line"])
            if progress is not None:
                progress(info)

        run_out = evolve_stage.run_dir(variant)
        # evolve opens the variant's runtime and closes it at its end: one variant's backbone and pool client
        # at a time
        out = evolve(variant, out_dir=run_out, submit=submit, progress=on_progress, metrics_dir=run_out,
                     reports_dir=run_out)
        stop_on_replay_misses(f"{stage} ({name})", out.get("replay_misses", 0))
        facts = timings_dir(cfg, timings, name)
        publish_variant(Path(out["run_dir"]), dest / name, overrides, facts)
        yield TrainedVariant(name, overrides, variant, out, dest / name, facts, round(time.perf_counter() - started, 3))


def publish_variant(run_out: Path, dest: Path, overrides: dict[str, Any], timings: Path | None = None) -> None:
    """A variant's coordinator, tables (less their run facts, which go to `timings`), summary and plots."""
    from trinity.evolve.outputs import publish_tables

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    publish_tables(run_out, dest, timings)
    coordinator = run_out / "coordinator"
    for name in ("coordinator.safetensors", "coordinator.json"):
        if (coordinator / name).exists():
            shutil.copy2(coordinator / name, dest / name)
    for src, renamed in (("evolve.json", "summary.json"), ("evolution.png", None), ("routing.png", None)):
        if (run_out / src).exists():
            shutil.copy2(run_out / src, dest / (renamed or src))
    (dest / "variant.yaml").write_text(mapping_yaml(overrides))
