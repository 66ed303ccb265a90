"""What an evolution run reads from the whole config, resolved here so the evolution loop (trinity.evolve.loop)
receives typed settings and never the config: its EvolveSettings (from the typed `evolve` section plus
`coordinator.routing`, `protocol.max_turns` and the pool's throughputs), the root seed, the key of the run
(`config_fingerprint`: what decides its results) and where its metrics and reports go."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trinity.config import as_written
from trinity.config_schema import TrinityConfig
from trinity.evolve.efficiency import pool_throughputs
from trinity.evolve.evaluators import Evaluation
from trinity.evolve.loop import EvolutionResult, EvolveSettings, run_evolution
from trinity.evolve.outputs import RunPaths

FINGERPRINT_SECTIONS = ("evolve", "protocol", "pool", "coordinator", "tasks")
# Settings that change how a run is executed, never what it computes: a budget raised after a budget
# stop, or a different concurrency, must still resume the same run.
# The frontier's weights (evolve.cost_weights*) say which other runs the frontier stage trains, not
# what this run computes: adding one must not restart the main run. The response cache's mode says where
# replies come from (a replay of the same replies computes the same run).
# evolve.constant_policy chooses among the run's result and fixed policies after the run: it never
# changes what the run computes.
FINGERPRINT_IGNORES = {"evolve": ("budget", "resume", "max_concurrent_episodes", "cost_weights", "cost_weights_unit",
                                  "response_cache", "constant_policy"),
                       "pool": ("state_dir", "startup_timeout_s")}
# Per pool model: where and how its server runs and how fast it was measured, not what it answers.
MODEL_IGNORES = ("port", "n_threads", "n_parallel", "max_concurrency", "requests_per_minute", "throughput",
                 "timeout_s")


def config_fingerprint(cfg: TrinityConfig, n_params: int) -> str:
    """The key of an evolution run: a digest of the sections that decide its results, as the config wrote them."""
    written = as_written(cfg)
    parts: dict[str, Any] = {"n_params": int(n_params), "seed": written.get("seed")}
    for section in FINGERPRINT_SECTIONS:
        value = written.get(section)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in FINGERPRINT_IGNORES.get(section, ())}
            if section == "pool" and isinstance(value.get("models"), dict):
                value["models"] = {name: ({k: v for k, v in m.items() if k not in MODEL_IGNORES}
                                          if isinstance(m, dict) else m) for name, m in value["models"].items()}
        parts[section] = value
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def evolution_settings(cfg: TrinityConfig) -> EvolveSettings:
    """The evolve section with the routing, the turn limit and the pool's throughputs (a model whose entry writes
    `n_threads` is a local server sharing this machine's cores)."""
    return EvolveSettings(cfg.evolve, routing=cfg.coordinator.routing.value, max_turns=cfg.protocol.max_turns,
                          throughputs=pool_throughputs(cfg.pool))


def run_evolution_from_config(cfg: TrinityConfig, *, n_params: int, evaluation: Evaluation, out_dir: Path,
                              metrics_dir: Path | None = None, reports_dir: Path | None = None,
                              pictures: bool = True, **options: Any) -> EvolutionResult:
    """trinity.evolve.loop.run_evolution with its settings, seed, run key and folders read from `cfg` (the run in
    `out_dir`, its metrics and reports in `paths.metrics` and `paths.reports` unless given; `pictures`: its PNGs
    drawn, RunPaths); the other keywords (start, reference_lines, progress, fresh) go through as they are."""
    paths = cfg.paths
    folders = RunPaths(Path(out_dir), Path(metrics_dir or paths.metrics), Path(reports_dir or paths.reports),
                       pictures=pictures)
    return run_evolution(evolution_settings(cfg), seed=cfg.seed,
                         config_key=config_fingerprint(cfg, n_params), n_params=n_params, evaluation=evaluation,
                         paths=folders, **options)
