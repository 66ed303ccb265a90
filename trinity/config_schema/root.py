"""The root schema: every group, plus the keys of conf/config.yaml (seed, runner, schedule) and the
`paths` and `ablations` groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.choices import PromoteRule, RunnerKind
from trinity.config_schema.coordinator import CoordinatorConfig
from trinity.config_schema.eval import EvalConfig
from trinity.config_schema.evolve import EvolveConfig
from trinity.config_schema.fields import composed_document, number
from trinity.config_schema.pool import PoolConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.config_schema.record import RecordConfig
from trinity.config_schema.serve import ServeConfig
from trinity.config_schema.tasks import TasksConfig
from trinity.errors import ConfigError


@dataclass(frozen=True)
class Paths:
    data: str = "data"
    prepared: str = "data/prepared"
    states: str = "data/states"
    runs: str = "data/evolve"
    eval: str = "data/eval"
    ablations: str = "data/ablations"
    frontier: str = "data/frontier"
    metrics: str = "metrics"
    reports: str = "reports"
    cache: str = ".trinity"
    model_cache: str | None = None
    timings: str = ".trinity/timings"      # wall times, pool work, cache hits: outside DVC's hashed outputs
    registry: str = "models"               # the model registry (trinity models, serve --registry, retraining)
    ad_hoc_runs: str = "runs"


@dataclass(frozen=True)
class Runner:
    kind: RunnerKind = RunnerKind.threads
    max_workers: int = number(8, gt=0)
    dask_address: str | None = None      # e.g. tcp://scheduler:8786; null: a local cluster
    dask_workers: int = number(2, gt=0)
    # processes that train the ablate stage's variants side by side (null: one per CPU on a replayed pool, one
    # on a live pool, whose servers the variants would share)
    variant_workers: int | None = number(None, gt=0)


@dataclass(frozen=True)
class Schedule:
    cron: str | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Retrain:
    """Champion and challenger (flows/retrain.py): when a retrained coordinator replaces the champion."""
    promote_rule: PromoteRule = PromoteRule.paired_test
    alpha: float = number(0.05, gt=0, le=1)
    min_items: int = number(20, gt=0)
    items: int | None = number(64, gt=0)       # null: every test item of the training suites
    warm_start: str | None = "champion"
    dvc_track: bool = True       # `dvc add` the registry after every change (trinity.models.tracking)
    # on a recording (pool.replay): items per suite and split that each run records first with the live
    # pool (budget: evolve.budget), so every run trains and gates on more items than the last; 0: none
    new_items: dict[str, int] = field(default_factory=lambda: {"train": 0, "validation": 0, "test": 0})

    def check(self, key: str) -> None:
        bad = sorted(set(self.new_items) - {"train", "validation", "test"})
        if bad or any(int(v) < 0 for v in self.new_items.values()):
            raise ConfigError(f"config key '{key}.new_items' maps train / validation / test to a count >= 0; "
                              f"got {dict(self.new_items)}")


@dataclass(frozen=True)
class PlanAssumptions:
    """`trinity plan`'s behavioural assumptions (optional keys; --accept etc. override them)."""
    accept_probability: float = number(0.5, ge=0, le=1)       # P(a Verifier says ACCEPT)
    thinker_suggests_worker: float = number(0.5, ge=0, le=1)  # P(a Thinker suggests a Worker next)
    typical_output_fraction: float = number(0.6, gt=0, le=1)  # typical reply length / its cap


@dataclass(frozen=True)
class Ablations:
    enabled: bool = False
    variants: list[str] | None = None    # null: every definition, in order
    definitions: dict[str, Any] = field(default_factory=dict)   # name -> {dotted key: value}


@dataclass(frozen=True)
class TrinityConfig:
    seed: int = 0
    pool: PoolConfig = field(default_factory=PoolConfig)
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    evolve: EvolveConfig = field(default_factory=EvolveConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    ablations: Ablations = field(default_factory=Ablations)
    paths: Paths = field(default_factory=Paths)
    runner: Runner = field(default_factory=Runner)
    schedule: Schedule = field(default_factory=Schedule)
    retrain: Retrain = field(default_factory=Retrain)
    plan: PlanAssumptions = field(default_factory=PlanAssumptions)
    record: RecordConfig = field(default_factory=RecordConfig)
    # The composed document this config was typed from (`conform` passes it): what params.yaml is written from,
    # what a run's key digests and what derived configs are made from, read only by the config floor
    # (trinity.config). Not a config key: equality and the schema walk leave it out.
    composed: Any = composed_document()
