"""What each stage that calls the pool will run, in the words `trinity plan` prices: jobs of episodes, each with
a route through the pool, on one suite, under one config.

`WORKLOADS` maps each such stage (evolve, frontier, ablate, evaluate; in the order `dvc repro` runs them) to its
hook `workload(cfg, ctx) -> [Part]`, built from the stage's own choices: the item counts of
trinity.pipeline.items, the variants of trinity.config.ablation_variants and frontier_stage.variants, the
methods as trinity.eval.methods expands them. trinity.plan prices the parts with the protocol's own turn rules
(trinity.episodes.protocol.TurnState) and the run's output caps (pool.providers.model_max_tokens). The hooks
live here rather than in the stage modules so that DVC, which reruns a stage when code it imports changes,
does not rerun training when only the estimate changes.

A route says how one episode uses the pool before anything is trained: agent and role probabilities per
turn. Every coordinator, trained or not, is estimated with x0's routing (a zero head: uniform over the pool
and the configured roles under sampling; the first model as a Worker under argmax)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES, Router


@dataclass(frozen=True)
class SuiteInfo:
    """What the plan knows of one suite: items per split, mean prompt length, where the figures come from."""
    name: str
    counts: dict[str, int]      # split -> items
    prompt_chars: float
    source: str                 # prepared | measured default | assumed default


@dataclass
class Route:
    """How one episode uses the pool: agent probabilities, role probabilities per turn (cycled), K."""
    agents: dict[str, float]
    roles: list[dict[str, float]]
    max_turns: int
    aggregator: str | None = None    # Mixture-of-Agents: every agent proposes, this one merges

    @classmethod
    def uniform(cls, agents: list[str], roles: list[str], max_turns: int) -> Route:
        return cls({a: 1.0 / len(agents) for a in agents}, [{r: 1.0 / len(roles) for r in roles}], max_turns)

    @classmethod
    def fixed(cls, agent: str, roles: list[dict[str, float]], max_turns: int) -> Route:
        return cls({agent: 1.0}, roles, max_turns)


def x0_route(cfg: TrinityConfig, agents: list[str], mode: str = "sample", max_turns: int | None = None) -> Route:
    k = int(max_turns or cfg.protocol.max_turns)
    if mode == "argmax":   # all logits 0: argmax is the first model and the first role (Worker)
        return Route.fixed(agents[0], [{"worker": 1.0}], k)
    roles = [str(r) for r in (cfg.coordinator.roles or ROLES)]
    return Route.uniform(agents, roles, k)


def method_route(name: str, cfg: TrinityConfig, agents: list[str], max_turns: int | None) -> tuple[Route, str | None]:
    """The route of an expanded eval method name (trinity.eval.methods), and a note when it is only estimated."""
    kind, _, arg = name.partition(":")
    k = int(max_turns or cfg.protocol.max_turns)
    if kind == "single":
        return Route.fixed(arg, [{"worker": 1.0}], 1), None
    if kind == "loop":
        return Route.fixed(arg, [{"worker": 1.0}, {"verifier": 1.0}], k), None
    if kind == "random":
        return Route.uniform(agents, list(ROLES), k), None
    if kind == "moa":
        return Route({a: 1.0 for a in agents}, [{"worker": 1.0}], 1, aggregator=arg), None
    if kind == "roles":
        base = x0_route(cfg, agents, max_turns=k)
        return Route.fixed(arg, base.roles, k), None
    route = x0_route(cfg, agents, max_turns=k)
    return route, None if kind in ("trinity", "ablation") else f"method '{name}' is not modelled: estimated as x0"


@dataclass
class Job:
    episodes: float
    route: Route
    suite: SuiteInfo
    cfg: TrinityConfig           # the config the episodes run under (a variant's for ablations)


@dataclass
class Part:
    stage: str
    name: str
    detail: str
    jobs: list[Job]
    note: str | None = None


@dataclass
class WorkloadContext:
    """What every stage's hook reads besides the config: the pool's models, the suites' figures, the main
    run's population size, and the notes the plan prints (a hook adds what it leaves out)."""
    agents: list[str]
    suites: Mapping[str, SuiteInfo]
    popsize: int
    notes: set[str] = field(default_factory=set)


def validations(cfg: TrinityConfig) -> int:
    """Validations of the mean after generations (x0's not counted): every `every` and after the last."""
    g, every = int(cfg.evolve.generations), cfg.evolve.validation.every
    return sum(1 for i in range(g) if i == g - 1 or (every and (i + 1) % int(every) == 0))


def evolution_parts(cfg: TrinityConfig, ctx: WorkloadContext, popsize: int, stage: str = "evolve",
                    prefix: str = "") -> list[Part]:
    """One evolution run of `cfg`: popsize candidates x a generation's items (balanced over the training suites,
    as trinity.pipeline.items.generation_items draws them) x repeats per generation; x0 validated before
    generation 0 and the mean after the validated generations, each in both routing modes."""
    from trinity.pipeline.items import balanced_counts

    infos, agents = ctx.suites, ctx.agents
    train = list(cfg.tasks.train)
    per_gen = balanced_counts(int(cfg.evolve.episodes_per_candidate), {s: infos[s].counts["train"] for s in train})
    val = balanced_counts(int(cfg.evolve.validation.n_items), {s: infos[s].counts["validation"] for s in train})
    gens, reps, n_val = int(cfg.evolve.generations), cfg.evolve.repeats, validations(cfg)
    sample, argmax = x0_route(cfg, agents), x0_route(cfg, agents, "argmax")
    times = popsize * gens * reps
    return [
        Part(stage, f"{prefix}train", f"{gens} gen x {popsize} cand x {sum(per_gen.values())} items x {reps} rep",
             [Job(k * times, sample, infos[s], cfg) for s, k in per_gen.items() if k]),
        Part(stage, f"{prefix}validate x0", f"gen -1: {sum(val.values())} items, sample + argmax",
             [Job(k, r, infos[s], cfg) for s, k in val.items() if k for r in (sample, argmax)]),
        Part(stage, f"{prefix}validate mean", f"{n_val} x {sum(val.values())} items x 2 modes",
             [Job(k * n_val * 2, sample, infos[s], cfg) for s, k in val.items() if k]),
    ]


def variant_run(stage: str, name: str, variant: TrinityConfig, ctx: WorkloadContext, popsize: int) -> Part:
    """A variant's whole evolution as one part (ablate and frontier train their variants this way)."""
    runs = evolution_parts(variant, ctx, popsize, stage=stage, prefix=f"{name}: ")
    return Part(stage, name, f"{runs[0].detail} + {validations(variant) + 1} validations x 2 modes",
                [j for p in runs for j in p.jobs])


def test_item_counts(cfg: TrinityConfig, ctx: WorkloadContext) -> dict[str, int]:
    """Test items per evaluated suite (trinity.pipeline.items.eval_suites), at most `eval.items_per_suite`."""
    from trinity.pipeline.items import eval_suites

    n = cfg.eval.items_per_suite
    return {s: ctx.suites[s].counts["test"] if n is None else min(int(n), ctx.suites[s].counts["test"])
            for s in eval_suites(cfg)}


def eval_item_counts(cfg: TrinityConfig, ctx: WorkloadContext) -> dict[str, int]:
    """Items per suite an evaluated method runs: the validation items evolution used (when `eval.sets` has
    them) + the test items (when it has those)."""
    from trinity.pipeline.evaluate_plan import set_names
    from trinity.pipeline.items import balanced_counts

    out: dict[str, int] = {}
    sets = set_names(cfg)
    if "validation" in sets:
        train = list(cfg.tasks.train)
        out.update(balanced_counts(int(cfg.evolve.validation.n_items),
                                   {s: ctx.suites[s].counts["validation"] for s in train}))
    if "test" in sets:
        for s, k in test_item_counts(cfg, ctx).items():
            out[s] = out.get(s, 0) + k
    return out


def expand_methods(cfg: TrinityConfig, agents: list[str], variants: Mapping[str, TrinityConfig]):
    """eval.methods expanded by the real registry, with a trained coordinator and the enabled ablation
    `variants` assumed to exist. Returns (methods, skipped)."""
    from trinity.eval import methods as registry

    def names() -> list[str]:
        if not variants:
            raise registry.MethodSkipped("ablations.enabled is false")
        return list(variants)

    def load(name: str) -> registry.Ablation:
        if name not in variants:
            raise registry.MethodSkipped(f"no enabled ablation variant '{name}'")
        return registry.Ablation(router=lambda: cast(Router, None), protocol=variants[name].protocol)

    # names only: no router is ever built from this context
    ctx = registry.MethodContext(agents=agents, strongest=0, coordinator_router=lambda mode: cast(Router, None),
                                 coordinator_routing=cfg.coordinator.routing.value,
                                 moa=cfg.eval.moa, ablation_names=names, load_ablation=load)
    return registry.expand_with_skips([str(n) for n in cfg.eval.methods], ctx)


# ---------------------------------------------------------------------------------- the stages' hooks

def evolve_workload(cfg: TrinityConfig, ctx: WorkloadContext) -> list[Part]:
    return evolution_parts(cfg, ctx, ctx.popsize)


def frontier_workload(cfg: TrinityConfig, ctx: WorkloadContext) -> list[Part]:
    """Every cost weight but the main run's trained at the main run's popsize, then every head (the main one
    too) and the baselines on the test items (the baselines' chunks are the evaluate stage's: counted here,
    free there, not modelled)."""
    from trinity.eval import methods as registry
    from trinity.pipeline import frontier_stage

    if not frontier_stage.cost_weights(cfg):
        return []
    weights = frontier_stage.variants(cfg)
    parts = [variant_run("frontier", name, variant, ctx, ctx.popsize) for name, (_, variant) in weights.items()]
    reps = cfg.eval.repeats
    items = test_item_counts(cfg, ctx)
    route = x0_route(cfg, ctx.agents, frontier_stage.routing_mode(cfg))   # served heads, estimated as x0
    for head in [frontier_stage.main_head(cfg)[0], *weights]:
        parts.append(Part("frontier", f"test {head}", f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, route, ctx.suites[s], cfg) for s, k in items.items() if k]))
    mctx = registry.MethodContext(agents=ctx.agents, strongest=0, moa=cfg.eval.moa)
    for m in registry.expand_with_skips(list(frontier_stage.BASELINES), mctx)[0]:
        mroute, note = method_route(m.name, cfg, ctx.agents, m.max_turns)
        parts.append(Part("frontier", f"test {m.name}", f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, mroute, ctx.suites[s], cfg) for s, k in items.items() if k], note))
    return parts


def ablate_workload(cfg: TrinityConfig, ctx: WorkloadContext) -> list[Part]:
    """Every selected ablation variant's evolution (at its own popsize when it sets one, else the main run's)."""
    from trinity import config as trinity_config

    parts = []
    for name, variant in trinity_config.ablation_variants(cfg).items():
        size = variant.evolve.popsize or ctx.popsize
        parts.append(variant_run("ablate", name, variant, ctx, size))
    return parts


def evaluate_workload(cfg: TrinityConfig, ctx: WorkloadContext) -> list[Part]:
    """Every method of eval.methods as the registry expands it, on the evaluated items x eval.repeats."""
    from trinity import config as trinity_config

    variants = trinity_config.ablation_variants(cfg)
    methods, skipped = expand_methods(cfg, ctx.agents, variants)
    for s in skipped:
        ctx.notes.add(f"evaluate: method {s.method} left out ({s.reason})")
    items, reps = eval_item_counts(cfg, ctx), cfg.eval.repeats
    parts = []
    for m in methods:
        kind, _, arg = m.name.partition(":")
        mcfg = variants[arg] if kind == "ablation" else cfg   # an ablation routes with its variant's roles
        route, note = method_route(m.name, mcfg, ctx.agents, m.max_turns)
        parts.append(Part("evaluate", m.name, f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, route, ctx.suites[s], mcfg) for s, k in items.items() if k], note))
    return parts


Workload = Callable[[TrinityConfig, WorkloadContext], list[Part]]
WORKLOADS: dict[str, Workload] = {"evolve": evolve_workload, "frontier": frontier_workload,
                                  "ablate": ablate_workload, "evaluate": evaluate_workload}
