"""The ablate stage: the paper's ablations (docs/METHOD.md) as trained variants, at the main run's budget.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trinity import config as trinity_config
from trinity.config import read_mapping
from trinity.config_schema import TrinityConfig
from trinity.pipeline import items as item_sel
from trinity.pipeline.population import Submit, inline_submit
from trinity.pipeline.variants import train_variants, variant_workers

log = logging.getLogger("trinity.ablate")

Evolve = Callable[..., dict]


def ablations_dir(cfg: TrinityConfig) -> Path:
    return Path(cfg.paths.ablations)


def variants(cfg: TrinityConfig) -> dict[str, tuple[dict[str, Any], TrinityConfig]]:
    """name -> (overrides as given, the variant's full config), in `ablations.variants` order. When the
    main run leaves evolve.popsize null (ceil(4 + 3 ln n)), it is pinned to the main run's value so every
    variant has the same episode budget whatever its parameter count."""
    out = {}
    configs = trinity_config.ablation_variants(cfg)
    popsize = None
    for name, variant in configs.items():
        overrides = dict(cfg.ablations.definitions[name] or {})
        if variant.evolve.popsize is None:
            popsize = popsize or main_popsize(cfg)
            variant = trinity_config.apply_overrides(variant, {"evolve.popsize": popsize}, where="ablations")
        out[name] = (overrides, variant)
    return out


def main_popsize(cfg: TrinityConfig) -> int:
    popsize = cfg.evolve.popsize
    if popsize is not None:
        return popsize
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.evolve.strategies import default_popsize

    return default_popsize(coordinator_from_config(cfg).num_params)


def budget(cfg: TrinityConfig, popsize: int) -> dict[str, int]:
    """The per-variant budget, identical for every variant (and the main run). Validation counts the items
    there are: `evolve.validation.n_items` is a cap, and a split with fewer items validates on all of them."""
    from trinity.evolve.loop import VALIDATION_MODES

    n_validation = len(item_sel.validation_items(cfg))
    ev = cfg.evolve
    repeats = ev.repeats
    per_generation = popsize * ev.episodes_per_candidate * repeats
    every = ev.validation.every or 0
    generations = ev.generations
    validations = len({g for g in range(generations) if g == generations - 1 or (every and (g + 1) % every == 0)})
    validations += 1  # x0, before generation 0; every validation runs with sample and argmax routing
    return {"popsize": popsize, "generations": generations, "episodes_per_candidate": int(ev.episodes_per_candidate),
            "repeats": repeats, "train_episodes_per_generation": per_generation,
            "train_episodes": per_generation * generations, "validation_items": n_validation,
            "validation_episodes": validations * len(VALIDATION_MODES) * n_validation,
            "max_turns": cfg.protocol.max_turns}


def run(cfg: TrinityConfig, *, submit: Submit = inline_submit,
        progress: Callable[[dict], None] | None = None, evolve: Evolve | None = None) -> dict:
    """Train every selected variant (resuming), publish each, write metrics/ablations.json."""
    dest_root = ablations_dir(cfg)
    metrics_path = Path(cfg.paths.metrics) / "ablations.json"
    chosen = variants(cfg)  # every variant's config is validated before any work starts
    if dest_root.exists():
        shutil.rmtree(dest_root)
    dest_root.mkdir(parents=True)
    summary: dict[str, Any] = {"enabled": bool(chosen), "variants": {}}
    if not chosen:
        log.info("ablations: disabled (ablations.enabled=false or no variants selected)")
    plans = {name: budget(variant, variant.evolve.popsize or main_popsize(cfg))
             for name, (_, variant) in chosen.items()}
    if plans:
        summary["budget"] = next(iter(plans.values()))

    def describe(name: str, overrides: dict, variant: TrinityConfig) -> str:
        plan = plans[name]
        return (", ".join(f"{k}={v}" for k, v in overrides.items()) + f"; budget {plan['generations']} generations x "
                f"{plan['train_episodes_per_generation']} train episodes (+{plan['validation_episodes']} validation "
                "episodes)")

    for done in train_variants(cfg, chosen, dest_root, stage="ablate", label="ablation", timings="ablations",
                               submit=submit, progress=progress, evolve=evolve, log=log, describe=describe,
                               workers=variant_workers(cfg, len(chosen))):
        name, overrides, variant, plan = done.name, done.overrides, done.config, plans[done.name]
        result = done.out["result"]
        # the variant's wall time and whether it resumed from a checkpoint are run facts: beside its tables'
        # run facts, not in metrics/ablations.json (a rerun in a warm checkout must write the same metrics)
        _write_json(done.timings / "wall.json", {"wall_s": done.wall_s, "resumed": result.resumed})
        summary["variants"][name] = {
            "overrides": overrides, "strategy": str(variant.evolve.strategy), "budget": plan,
            "final_validation_reward": final_validation_reward(dest_root / name / "generations.parquet"),
            "best_validation_reward": result.best_validation_reward, "best_generation": result.best_generation,
            "x0_validation_reward": result.x0_validation_reward, "beats_x0": result.beats_x0,
            "generations_completed": result.generations_completed, "stop_reason": result.stop_reason,
            **_totals(dest_root / name / "summary.json"),
        }
        log.info("ablation %s: done, best validation reward %s (generation %s), stop: %s", name,
                 result.best_validation_reward, result.best_generation, result.stop_reason)
        _write_json(metrics_path, summary)  # after every variant, so a long stage shows where it is
    _write_json(metrics_path, summary)
    return {"path": str(dest_root), "metrics": summary}


def load_overrides(variant_dir: Path) -> dict[str, Any]:
    """The overrides mapping of a published variant (apply with trinity.config.apply_overrides)."""
    return read_mapping(Path(variant_dir) / "variant.yaml")   # a mapping: publish_variant writes one


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
