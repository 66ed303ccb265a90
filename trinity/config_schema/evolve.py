"""Schema of the `evolve` group: the optimiser, its budget, the fitness and the evolution's validation."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.config_schema.choices import (
    CostUnit,
    FitnessEstimate,
    FrontierCostUnit,
    Optimizer,
    ResponseCacheMode,
    TrainItems,
    ValidationSelect,
)
from trinity.config_schema.fields import number
from trinity.errors import ConfigError


@dataclass(frozen=True)
class Fitness:
    """fitness = reward + entropy_weight * H(agents) - turn_weight * turn term - cost_weight * cost."""
    entropy_weight: float = number(0.15, ge=0)
    turn_weight: float = number(0.10, ge=0)
    cost_weight: float = number(0.0, ge=0)
    cost_unit: CostUnit = CostUnit.usd
    # sampled: each candidate's episodes (the paper) | exact: its expected reward and shaping terms over every
    # training item of a complete recording (pool=recorded), walking the trees; no sampling noise, no pool call
    estimate: FitnessEstimate = FitnessEstimate.sampled
    # capacity control: - l2_weight * mean(params^2), what the strategy is told (the logged reward is not
    # changed). A head of (L + 3) x d numbers can fit a few dozen training items by heart; the penalty keeps
    # it near x0 (uniform routing) unless the reward pays for moving. 0: off (the paper)
    l2_weight: float = number(0.0, ge=0)


@dataclass(frozen=True)
class Validation:
    every: int | None = number(5, ge=0)      # validate the mean every N generations; null/0: at the end
    n_items: int = number(64, gt=0)
    # which validated mean is kept (trinity.evolve.selection): max (the paper) | paired_gain | one_se; the last
    # two ask for a gain beyond `margin` standard errors of the paired per-item differences
    select: ValidationSelect = ValidationSelect.max
    margin: float = number(1.0, ge=0)


@dataclass(frozen=True)
class ConstantPolicy:
    """evolve.constant_policy: never below a constant policy (trinity.pipeline.constant_policy). On a recording
    (exact values, SVF off) the kept coordinator is chosen on the validation items, by evolve.validation.select,
    among the best prompt-independent policy of the training and validation items (a head with a per-turn prior and
    zero weights), the evolved head plus that prior at each strength, and the evolved head. Elsewhere: not applied."""
    enabled: bool = True
    strengths: list[float] = number(default_factory=lambda: [16.0, 4.0, 1.0], gt=0)


@dataclass(frozen=True)
class BudgetLimits:
    """Limits on real (uncached) pool calls of the run; null: unlimited."""
    max_cost_usd: float | None = number(None, ge=0)
    max_tokens: int | None = number(None, ge=0)
    max_calls: int | None = number(None, ge=0)


@dataclass(frozen=True)
class Reinforce:
    """evolve.reinforce: the on-policy method's settings (trinity.evolve.on_policy.Reinforce)."""
    learning_rate: float = number(0.001, gt=0)
    optimizer: Optimizer = Optimizer.adam
    beta1: float = number(0.9, ge=0, le=1)
    beta2: float = number(0.999, ge=0, le=1)
    eps: float = number(1e-8, gt=0)


@dataclass(frozen=True)
class CostWeights:
    """evolve.cost_weights read on its own (the frontier stage)."""
    weights: list[float] = number(default_factory=list, ge=0)

    def check(self, key: str) -> None:
        if len(set(self.weights)) != len(self.weights):
            raise ConfigError(f"config key '{key}' lists a weight twice: {list(self.weights)}")


@dataclass(frozen=True)
class EvolveConfig:
    strategy: str = "sep_cma"                  # a name in trinity.evolve.strategy_registry.STRATEGIES
    sigma0: float = number(0.03, gt=0)
    popsize: int | None = number(None, gt=0)   # null: ceil(4 + 3 ln n)
    generations: int = number(60, gt=0)
    episodes_per_candidate: int = number(16, gt=0)
    repeats: int = number(1, gt=0)
    train_items: TrainItems = TrainItems.resample
    max_train_items: int | None = number(None, gt=0)   # null: every training item; N: a seeded suite-balanced subset
    fitness: Fitness = field(default_factory=Fitness)
    cost_weights: list[float] = number(default_factory=list, ge=0)   # the frontier stage: one head per weight
    cost_weights_unit: FrontierCostUnit = FrontierCostUnit.auto
    validation: Validation = field(default_factory=Validation)
    constant_policy: ConstantPolicy = field(default_factory=ConstantPolicy)
    early_stop_patience: int | None = number(None, ge=0)   # null or 0: never stop early
    warm_start: str | None = None           # null: x0 = 0; champion: the registry's champion; or a path
    warm_start_sigma0: float | None = number(None, gt=0)   # null: sigma0
    resume: bool = True
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    response_cache: ResponseCacheMode = ResponseCacheMode.read_write
    max_concurrent_episodes: int = number(64, gt=0)
    reinforce: Reinforce | None = None     # evolve=reinforce sets it; absent: the defaults above

    def check(self, key: str) -> None:
        # the strategy name is checked against the registry when the config is composed (trinity.config)
        CostWeights(list(self.cost_weights)).check(f"{key}.cost_weights")
