"""The ablate stage: the paper's ablations (TRINITY_SPEC) as trained variants, at the main run's budget.

A variant is the composed config plus dotted overrides (`ablations.definitions.<name>`, selected by
`ablations.variants`): other optimisers (random search, REINFORCE) on the same head, or other heads
(no Thinker, no roles, last token, SVF). Each runs exactly the evolution the evolve stage runs
(`evolve_stage.evolve`), with the same popsize, generations, episodes per candidate and validation
items, in its own checkpoint folder keyed by its config, so a killed stage resumes each variant where it
stopped and a finished variant is not rerun.

Outputs per variant, in `<paths.ablations>/<name>/` (DVC out `data/ablations`):
    coordinator.safetensors (+ .json metadata)   the best mean by validation, as the evolve stage keeps
    variant.yaml                                 the overrides mapping (apply to the config to load it)
    generations.parquet, episodes.parquet        the per-generation and per-episode tables
    routing.parquet, routing.png                 the mean's routing matrix per generation (-1: x0)
    summary.json                                 the run's metrics (as metrics/evolve.json for the main run)
and `metrics/ablations.json`: the budget every variant had and each variant's validation rewards.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from trinity import config as trinity_config
from trinity.pipeline import evolve_stage
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.workspace import timings_dir

log = logging.getLogger("trinity.ablate")

Evolve = Callable[..., dict]


def ablations_dir(cfg: DictConfig) -> Path:
    return Path(OmegaConf.select(cfg, "paths.ablations") or Path(cfg.paths.data) / "ablations")


def variants(cfg: DictConfig) -> dict[str, tuple[dict[str, Any], DictConfig]]:
    """name -> (overrides as given, the variant's full config), in `ablations.variants` order. When the
    main run leaves evolve.popsize null (ceil(4 + 3 ln n)), it is pinned to the main run's value so every
    variant has the same episode budget whatever its parameter count."""
    out = {}
    configs = trinity_config.ablation_variants(cfg)
    popsize = None
    for name, variant in configs.items():
        overrides = OmegaConf.to_container(cfg.ablations.definitions[name], resolve=True) or {}
        if variant.evolve.get("popsize") is None:
            popsize = popsize or main_popsize(cfg)
            OmegaConf.update(variant, "evolve.popsize", popsize, merge=False)
        out[name] = (overrides, variant)
    return out


def main_popsize(cfg: DictConfig) -> int:
    if cfg.evolve.get("popsize") is not None:
        return int(cfg.evolve.popsize)
    from trinity.coordinator.coordinator import Coordinator
    from trinity.evolve.strategies import default_popsize

    return default_popsize(Coordinator.from_config(cfg).num_params)


def budget(cfg: DictConfig, popsize: int) -> dict[str, int]:
    """The per-variant budget, identical for every variant (and the main run)."""
    from trinity.evolve.loop import VALIDATION_MODES

    ev = cfg.evolve
    per_generation = popsize * int(ev.episodes_per_candidate) * int(ev.get("repeats", 1))
    every = (ev.get("validation") or {}).get("every") or 0
    generations = int(ev.generations)
    validations = len({g for g in range(generations) if g == generations - 1 or (every and (g + 1) % every == 0)})
    validations += 1  # x0, before generation 0; every validation runs with sample and argmax routing
    return {"popsize": popsize, "generations": generations, "episodes_per_candidate": int(ev.episodes_per_candidate),
            "repeats": int(ev.get("repeats", 1)), "train_episodes_per_generation": per_generation,
            "train_episodes": per_generation * generations, "validation_items": int(ev.validation.n_items),
            "validation_episodes": validations * len(VALIDATION_MODES) * int(ev.validation.n_items),
            "max_turns": int(cfg.protocol.max_turns)}


def run(cfg: DictConfig, *, submit: evolve_stage.Submit = evolve_stage.inline_submit,
        progress: Callable[[dict], None] | None = None, evolve: Evolve | None = None) -> dict:
    """Train every selected variant (resuming), publish each, write metrics/ablations.json."""
    from trinity.pipeline.rollouts import RolloutContext

    evolve = evolve or evolve_stage.evolve
    dest_root = ablations_dir(cfg)
    metrics_path = Path(cfg.paths.metrics) / "ablations.json"
    chosen = variants(cfg)  # every variant's config is validated before any work starts
    if dest_root.exists():
        shutil.rmtree(dest_root)
    dest_root.mkdir(parents=True)
    summary: dict[str, Any] = {"enabled": bool(chosen), "variants": {}}
    if not chosen:
        log.info("ablations: disabled (ablations.enabled=false or no variants selected)")
    for i, (name, (overrides, variant)) in enumerate(chosen.items(), start=1):
        plan = budget(variant, int(variant.evolve.popsize))
        summary.setdefault("budget", plan)
        prefix = f"ablation {i}/{len(chosen)} {name}"
        log.info("%s: %s; budget %d generations x %d train episodes (+%d validation episodes)", prefix,
                 ", ".join(f"{k}={v}" for k, v in overrides.items()), plan["generations"],
                 plan["train_episodes_per_generation"], plan["validation_episodes"])
        out_dir = evolve_stage.run_dir(variant)
        started = time.perf_counter()

        def on_progress(info: dict, name: str = name, prefix: str = prefix, index: int = i) -> None:
            info = {**info, "variant": name, "variant_index": index, "variants": len(chosen),
                    "line": f"{prefix}: {info.get('line', '')}"}
            log.info(info["line"])
            if progress is not None:
                progress(info)

        try:
            out = evolve(variant, out_dir=out_dir, submit=submit, progress=on_progress,
                         metrics_dir=out_dir, reports_dir=out_dir)
        finally:
            RolloutContext.close_all()  # one variant's backbone and pool client at a time
        stop_on_replay_misses(f"ablate ({name})", out.get("replay_misses", 0))
        result = out["result"]
        timings = timings_dir(cfg, "ablations", name)
        publish_variant(Path(out["run_dir"]), dest_root / name, overrides, timings)
        # the variant's wall time is a run fact: beside its tables' run facts, not in metrics/ablations.json
        _write_json(timings / "wall.json", {"wall_s": round(time.perf_counter() - started, 3)})
        summary["variants"][name] = {
            "overrides": overrides, "strategy": str(variant.evolve.strategy), "budget": plan,
            "final_validation_reward": final_validation_reward(dest_root / name / "generations.parquet"),
            "best_validation_reward": result.best_validation_reward, "best_generation": result.best_generation,
            "x0_validation_reward": result.x0_validation_reward, "beats_x0": result.beats_x0,
            "generations_completed": result.generations_completed, "stop_reason": result.stop_reason,
            "resumed": result.resumed,
            **_totals(dest_root / name / "summary.json"),
        }
        log.info("%s: done, best validation reward %s (generation %s), stop: %s", prefix,
                 result.best_validation_reward, result.best_generation, result.stop_reason)
        _write_json(metrics_path, summary)  # after every variant, so a long stage shows where it is
    _write_json(metrics_path, summary)
    return {"path": str(dest_root), "metrics": summary}


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
    for src, name in (("evolve.json", "summary.json"), ("evolution.png", None), ("routing.png", None)):
        if (run_out / src).exists():
            shutil.copy2(run_out / src, dest / (name or src))
    (dest / "variant.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(overrides)))


def load_overrides(variant_dir: Path) -> dict[str, Any]:
    """The overrides mapping of a published variant (apply with trinity.config.apply_overrides)."""
    return OmegaConf.to_container(OmegaConf.load(Path(variant_dir) / "variant.yaml"), resolve=True) or {}


def final_validation_reward(generations: Path) -> float | None:
    if not generations.exists():
        return None
    import polars as pl

    values = pl.read_parquet(generations)["validation_reward"].drop_nulls()
    return float(values[-1]) if len(values) else None


def _totals(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {k: data.get(k) for k in ("n_params", "popsize", "episodes", "calls", "tokens")}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
