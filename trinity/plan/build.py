"""The plan of a configuration: each stage's workload (trinity.pipeline.workload.WORKLOADS) priced."""

from __future__ import annotations

from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.pipeline.items import eval_suites
from trinity.pipeline.workload import WORKLOADS, Part, WorkloadContext
from trinity.plan.assumptions import Assumptions
from trinity.plan.popsize import resolve_popsize
from trinity.plan.suites import suite_infos
from trinity.plan.tokens import CHARS_PER_TOKEN
from trinity.plan.usage import SCENARIOS, Usage, cost_usd, part_usage, wall_s


def build_plan(cfg: TrinityConfig, assumptions: Assumptions | None = None) -> dict[str, Any]:
    """The plan of `cfg` as one JSON-able dict: stages with their parts, totals, wall time, notes."""
    a = assumptions or Assumptions()
    notes: set[str] = set()
    agents = list(cfg.pool.models)
    suites = list(cfg.tasks.train) + list(cfg.tasks.transfer) + eval_suites(cfg)
    infos = suite_infos(cfg, suites)
    popsize = resolve_popsize(cfg, len(agents), notes)
    ctx = WorkloadContext(agents, infos, popsize, notes)
    stages = {name: workload(cfg, ctx) for name, workload in WORKLOADS.items()}
    out_stages = [_stage_json(name, parts, cfg, a, notes) for name, parts in stages.items() if parts]
    return {"pool": cfg.pool.name, "models": agents, "max_turns": cfg.protocol.max_turns,
            "popsize": popsize, "assumptions": {**a.__dict__, "routing": "x0 (uniform) for every coordinator"},
            "suites": {s: {**i.counts, "prompt_tokens": round(i.prompt_chars / CHARS_PER_TOKEN), "source": i.source}
                       for s, i in infos.items()},
            "stages": out_stages, "total": _total_json(out_stages), "notes": sorted(notes | _fixed_notes(cfg))}


def _fixed_notes(cfg: TrinityConfig) -> set[str]:
    out = {"estimates ignore the response cache (candidates share calls through common random numbers; a rerun "
           "with a warm cache costs less), early stopping and budgets",
           "trained coordinators are estimated with x0's routing (uniform over models and roles)"}
    if cfg.evolve.train_items.value == "fixed":
        out.add("evolve.train_items = fixed: later generations repeat generation 0's items, so most of their "
                "calls are response-cache hits; the training figures count them all")
    budget = cfg.evolve.budget.max_cost_usd
    if budget is not None:
        out.add(f"evolve.budget.max_cost_usd = {budget}: a run stops there, whatever the plan says")
    return out


def figures(u: Usage, cfg: TrinityConfig) -> dict[str, float]:
    return {"prompt_tokens": sum(u.prompt.values()), "completion_tokens": sum(u.completion.values()),
            "cost_usd": cost_usd(u, cfg)}


def _usage_json(u: dict[str, Usage], cfg: TrinityConfig) -> dict[str, Any]:
    typical = u["typical"]
    return {"episodes": typical.episodes, "calls": typical.total_calls, "max_calls": typical.max_calls,
            "calls_per_episode": typical.total_calls / typical.episodes if typical.episodes else 0.0,
            **{s: figures(u[s], cfg) for s in SCENARIOS}}


def _stage_json(name: str, parts: list[Part], cfg: TrinityConfig, a: Assumptions, notes: set[str]) -> dict[str, Any]:
    fractions = {"typical": a.output_fraction, "at_cap": 1.0}
    totals = {s: Usage() for s in SCENARIOS}
    rows = []
    for p in parts:
        usage = {s: part_usage(p, a, f, notes) for s, f in fractions.items()}
        for s in SCENARIOS:
            totals[s].add(usage[s])
        rows.append({"part": p.name, "detail": p.detail, "note": p.note, **_usage_json(usage, cfg)})
    walls = {s: wall_s(totals[s], cfg) for s in SCENARIOS}
    return {"stage": name, "parts": rows, "totals": _usage_json(totals, cfg),
            "wall_s": {s: walls[s][0] for s in SCENARIOS}, "wall_unknown_models": walls["typical"][1],
            "wall_no_prefill_models": walls["typical"][2]}


def _total_json(stages: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("episodes", "calls", "max_calls")
    total: dict[str, Any] = {k: sum(s["totals"][k] for s in stages) for k in keys}
    total["calls_per_episode"] = total["calls"] / total["episodes"] if total["episodes"] else 0.0
    for sc in SCENARIOS:
        total[sc] = {k: sum(s["totals"][sc][k] for s in stages)
                     for k in ("prompt_tokens", "completion_tokens", "cost_usd")}
    unknown = sorted({m for s in stages for m in s["wall_unknown_models"]})
    total["wall_s"] = {sc: None if unknown else sum(s["wall_s"][sc] for s in stages) for sc in SCENARIOS}
    total["wall_unknown_models"] = unknown
    total["wall_no_prefill_models"] = sorted({m for s in stages for m in s["wall_no_prefill_models"]})
    return total
