"""Evolution: black-box strategies and on-policy methods with explicit state (one registry), fitness
shaping, checkpoints, Polars tables, plots, learning diagnostics (x0 baseline, both validation modes,
episode shares, the mean's routing matrix).

Importing this package is cheap; the names below load their modules (pycma, polars) on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "BudgetExhausted": "trinity.evolve.errors",
    "CheckpointError": "trinity.evolve.errors",
    "ALGORITHMS": "trinity.evolve.algorithms",
    "make_algorithm": "trinity.evolve.algorithms",
    "BlackBoxStrategy": "trinity.evolve.strategies",
    "default_popsize": "trinity.evolve.strategies",
    "OnPolicyMethod": "trinity.evolve.on_policy",
    "EpisodeRecord": "trinity.evolve.on_policy",
    "EpisodeBatch": "trinity.evolve.on_policy",
    "FitnessWeights": "trinity.evolve.fitness",
    "FitnessParts": "trinity.evolve.fitness",
    "shaped_fitness": "trinity.evolve.fitness",
    "agent_entropy": "trinity.evolve.fitness",
    "EvolutionResult": "trinity.evolve.loop",
    "EvolveSettings": "trinity.evolve.loop",
    "run_evolution": "trinity.evolve.loop",
    "VALIDATION_MODES": "trinity.evolve.loop",
    "routing_matrix": "trinity.evolve.diagnostics",
    "training_diagnostics": "trinity.evolve.diagnostics",
    "ended_without_answer": "trinity.evolve.diagnostics",
    "RunPaths": "trinity.evolve.outputs",
    "EPISODES_SCHEMA": "trinity.evolve.tables",
    "GENERATIONS_SCHEMA": "trinity.evolve.tables",
    "ROUTING_SCHEMA": "trinity.evolve.tables",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trinity.evolve' has no attribute {name!r}")
