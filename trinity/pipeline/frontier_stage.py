"""The frontier stage: a cost-quality frontier of coordinators to serve from (README "The cost-quality frontier").

The evolve stage trains with the fitness's cost weight at 0 (the paper's setting) and reports what the
coordinator spends afterwards. Here every weight w of `evolve.cost_weights` trains one more coordinator,
`cost_w<w>`, with `evolve.fitness.cost_weight: w` (and the cost unit `evolve.cost_weights_unit` resolves
to: dollars at list prices when every pool model has a price, else thousands of tokens), the way the
ablate stage trains a variant: the composed config plus those overrides, at the main run's budget, in a
checkpoint folder of its own keyed by its config (trinity.pipeline.evolve_stage.run_dir), so a killed stage
resumes each weight where it stopped and a finished one costs nothing. Every run shares the response
cache (paths.cache): a later weight replays the calls an earlier one (or the main run) already made.

Then the heads (the cost-blind main coordinator from the evolve stage, named after its own cost weight,
and every weight's) and the baselines the picture sets them against (every single model, random routing,
Mixture-of-Agents) run on the evaluate stage's test items with its episode specs and its saved-chunk
cache (paths.cache/eval/<config key>/), so the evaluate stage later finds the baselines' chunks done.
Heads are routed as `serve.routing` says (what `trinity serve --frontier` will do). Reward and cost per
query get 95% intervals, and the heads no other head beats on both are marked (trinity.eval.frontier).

Outputs, in <paths.frontier> (DVC out data/frontier; `trinity serve --frontier` loads the folder):
    frontier.json       the manifest: cost unit, routing, test items, weights, and per head its cost weight,
                        reward and cost per query with intervals, on_frontier and its folder
    frontier.parquet    the same table, with the baselines (kind = baseline)
    results.parquet     every test episode of every head and baseline (trinity.eval.tables.RESULTS_SCHEMA)
    <head>/coordinator.safetensors (+ .json), variant.yaml (its overrides), and a weight's run tables
and metrics/frontier.json (the table, each weight's training: episodes, calls; its wall time and response-cache
hits are run facts, in paths.timings/frontier/<head>/training.json),
reports/frontier.png. With `evolve.cost_weights` empty nothing is trained or evaluated; the manifest and
the metrics say `enabled: false` and the picture says why.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from trinity.assembly.runtime import StageRuntime
from trinity.config import with_values
from trinity.config_schema import TrinityConfig
from trinity.coordinator.saved import coordinator_file
from trinity.errors import TrinityError
from trinity.pipeline.population import Submit, inline_submit
from trinity.pipeline.rollouts import stop_on_replay_misses
from trinity.pipeline.stage_runtime import open_stage_runtime
from trinity.pipeline.workspace import timings_dir

log = logging.getLogger("trinity.frontier")

BASELINES = ("single_worker", "random", "moa")   # the points the picture sets the heads against
Evolve = Callable[..., dict]


class FrontierInputError(TrinityError):
    """What the stage needs is missing (the main coordinator): names the stage to run first."""


# -------------------------------------------------------------------------------------- configuration

def cost_weights(cfg: TrinityConfig) -> list[float]:
    """`evolve.cost_weights` (the frontier stage trains one coordinator per weight): distinct numbers
    >= 0 (checked by the schema); [] or absent: no frontier."""
    return [float(w) for w in cfg.evolve.cost_weights]


def cost_unit(cfg: TrinityConfig) -> str:
    """`evolve.cost_weights_unit`, resolved: `auto` is dollars when every pool model has a price (a free
    model would cost nothing in dollars and take every turn), else thousands of tokens."""
    unit = cfg.evolve.cost_weights_unit.value
    if unit != "auto":
        return unit
    models = list(cfg.pool.models.values())
    priced = all((m.price_in_per_mtok or 0) > 0 or (m.price_out_per_mtok or 0) > 0 for m in models)
    return "usd" if models and priced else "ktokens"


def head_name(weight: float) -> str:
    return f"cost_w{weight:g}"


def main_head(cfg: TrinityConfig) -> tuple[str, float]:
    weight = float(cfg.evolve.fitness.cost_weight)
    return head_name(weight), weight


def variants(cfg: TrinityConfig) -> dict[str, tuple[dict[str, Any], TrinityConfig]]:
    """name -> (overrides, the weight's full config), in `evolve.cost_weights` order. A weight equal to
    the main run's own is the main run: it is not trained twice."""
    from trinity import config as trinity_config

    unit, (main_name, _) = cost_unit(cfg), main_head(cfg)
    out = {}
    for w in cost_weights(cfg):
        name = head_name(w)
        if name == main_name:
            continue
        overrides = {"evolve.fitness.cost_weight": w, "evolve.fitness.cost_unit": unit}
        out[name] = (overrides, trinity_config.apply_overrides(cfg, overrides, where="evolve.cost_weights"))
    return out


def frontier_dir(cfg: TrinityConfig) -> Path:
    return Path(cfg.paths.frontier)


def routing_mode(cfg: TrinityConfig) -> str:
    return cfg.serve.routing.value


# ------------------------------------------------------------------------------------------------ run

def run(cfg: TrinityConfig, *, submit: Submit = inline_submit,
        progress: Callable[[dict], None] | None = None, on_work=None, evolve: Evolve | None = None) -> dict:
    """Train every weight (resuming), evaluate every head and baseline, write the outputs."""
    dest = frontier_dir(cfg)
    metrics_path = Path(cfg.paths.metrics) / "frontier.json"
    picture = Path(cfg.paths.reports) / "frontier.png"
    weights = cost_weights(cfg)
    main_coordinator = coordinator_file(Path(cfg.paths.runs) / "coordinator")
    if weights and not main_coordinator.is_file():
        raise FrontierInputError(f"no trained coordinator at {main_coordinator}: run the evolve stage first "
                                 "(trinity run evolve)")
    chosen = variants(cfg)   # every weight's config is checked before any work starts
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if not weights:
        return _disabled(dest, metrics_path, picture)

    unit = cost_unit(cfg)
    training = train(cfg, chosen, dest, submit=submit, progress=progress, evolve=evolve, metrics_path=metrics_path)
    name, weight = main_head(cfg)
    publish_main(main_coordinator.parent, dest / name)
    heads = {name: weight, **{n: float(ov["evolve.fitness.cost_weight"]) for n, (ov, _) in chosen.items()}}
    results = evaluate(cfg, dest, heads, on_work=on_work)
    from trinity.eval import frontier as fr

    table = fr.frontier_table(results, heads, unit, samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))
    manifest = write_outputs(cfg, dest, table, results, heads, unit=unit, reference=name, training=training,
                             metrics_path=metrics_path)
    fr.plot(table, picture, title=title(cfg, manifest))
    return {"path": str(dest), "manifest": manifest, "table": table}


def train(cfg: TrinityConfig, chosen: dict, dest: Path, *, submit, progress, evolve: Evolve | None,
          metrics_path: Path) -> dict[str, dict]:
    """Each weight's evolution at the main run's budget, one after the other; per weight what it took."""
    from trinity.pipeline.variants import train_variants

    out: dict[str, dict] = {}
    for done in train_variants(cfg, chosen, dest, stage="frontier", label="frontier", timings="frontier",
                               submit=submit, progress=progress, evolve=evolve, log=log):
        name, overrides, timings, result = done.name, done.overrides, done.timings, done.out
        r = result["result"]
        summary = dest / name / "summary.json"
        totals = json.loads(summary.read_text()) if summary.is_file() else {}
        measured = json.loads((timings / "timings.json").read_text()) if (timings / "timings.json").is_file() else {}
        calls, hits = totals.get("calls") or 0, measured.get("cache_hits") or 0
        out[name] = {"overrides": overrides, "best_validation_reward": r.best_validation_reward,
                     "best_generation": r.best_generation, "generations_completed": r.generations_completed,
                     "stop_reason": r.stop_reason, "episodes": totals.get("episodes"),
                     "calls": calls}
        # run facts (wall time, resumed or not, response-cache hits, paid cost): beside the tables' run facts,
        # outside DVC's outputs
        wall = done.wall_s
        _write_json(timings / "training.json", {"wall_s": wall, "resumed": r.resumed, "cache_hits": hits,
                                                "pool_calls": calls - hits, "paid_usd": measured.get("cost_usd")})
        log.info("frontier %s: done in %.1f s, best validation reward %s, %d of %d calls from the response cache", name,
                 wall, r.best_validation_reward, hits, calls)
        _write_json(metrics_path, {"enabled": True, "training": out})   # where a long stage is
    return out


def publish_main(coordinator_dir: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("coordinator.safetensors", "coordinator.json"):
        if (coordinator_dir / name).exists():
            shutil.copy2(coordinator_dir / name, dest / name)
    (dest / "variant.yaml").write_text("{}\n")


def evaluate(cfg: TrinityConfig, dest: Path, heads: dict[str, float], *, on_work=None) -> pl.DataFrame:
    """Every head and baseline on the evaluate stage's test items, through its chunk machinery and cache."""
    with open_stage_runtime(cfg) as ctx:
        results, misses = evaluate_on(ctx, cfg, dest, heads, on_work=on_work)
    stop_on_replay_misses("frontier (evaluation)", misses)
    from trinity.eval.tables import write_results

    write_results(results, dest / "results.parquet", timings_dir(cfg, "frontier") / "results.parquet")
    return results


def evaluate_on(ctx: StageRuntime, cfg: TrinityConfig, dest: Path, heads: dict[str, float], *,
                on_work=None) -> tuple[pl.DataFrame, int]:
    """`evaluate` on the runtime `ctx`: the results and the replay misses."""
    from trinity.eval import methods as registry
    from trinity.eval.frontier import METHOD_PREFIX
    from trinity.eval.methods import mode_fingerprint
    from trinity.pipeline.evaluate_methods import fingerprint, load_checked_params
    from trinity.pipeline.evaluate_plan import plan_chunks
    from trinity.pipeline.evaluate_run import run_chunks

    mode = routing_mode(cfg)
    mctx = registry.MethodContext(agents=ctx.agents, strongest=0, moa=cfg.eval.moa)

    def head_router(params: np.ndarray) -> Callable[[registry.MethodContext], Any]:
        return lambda _c: ctx.router_for(params, mode)

    methods = []
    for name in heads:
        params = load_checked_params(ctx.coordinator, coordinator_file(dest / name))
        methods.append(registry.Method(
            f"{METHOD_PREFIX}{name}", head_router(params),
            fingerprint=mode_fingerprint(fingerprint(params), mode)))
    baselines, skipped = registry.expand_with_skips(list(BASELINES), mctx)
    for s in skipped:
        log.info("frontier: baseline %s left out: %s", s.method, s.reason)
    sets = {"test": test_items(cfg)}
    if not sets["test"]:
        raise FrontierInputError(f"no test items in {cfg.paths.prepared} for the evaluated suites: run the prepare "
                                 "stage first (trinity run prepare)")
    finished, pending = plan_chunks(cfg, ctx, mctx, methods + baselines, sets)
    results = run_chunks(ctx, finished, pending, say=log.info, on_work=on_work)
    return results, ctx.replay_misses()


def test_items(cfg: TrinityConfig) -> dict[str, list]:
    """The evaluate stage's test items (eval.suites, eval.items_per_suite, its seeded sample), whatever
    `eval.sets` says: the frontier is measured on held-out items only."""
    from trinity.pipeline.evaluate_plan import eval_sets

    return eval_sets(with_values(cfg, {"eval.sets": ["test"]}))["test"]


# -------------------------------------------------------------------------------------------- outputs

def write_outputs(cfg: TrinityConfig, dest: Path, table: pl.DataFrame, results: pl.DataFrame,
                  heads: dict[str, float], *, unit: str, reference: str, training: dict[str, dict],
                  metrics_path: Path) -> dict:
    from trinity.eval import frontier as fr

    table.write_parquet(dest / "frontier.parquet")
    items = results.filter(pl.col("method") == f"{fr.METHOD_PREFIX}{reference}").height
    rows = {r["name"]: {k: fr.finite(v) for k, v in r.items()} for r in table.to_dicts()}
    manifest: dict[str, Any] = {
        "enabled": True, "cost_unit": unit, "routing": routing_mode(cfg), "items": items,
        "suites": sorted(set(results["suite"].to_list())), "cost_weights": cost_weights(cfg),
        "reference_head": reference,
        "heads": [{"name": n, "cost_weight": heads[n], "path": f"{n}/coordinator.safetensors",
                   "reward": rows[n]["reward"], "reward_ci": [rows[n]["reward_low"], rows[n]["reward_high"]],
                   "cost_per_query": rows[n]["cost"], "cost_ci": [rows[n]["cost_low"], rows[n]["cost_high"]],
                   "cost_per_query_usd": rows[n]["cost_per_query_usd"], "tokens_per_query": rows[n]["tokens_per_query"],
                   "on_frontier": rows[n]["on_frontier"]} for n in heads if n in rows],
    }
    _write_json(dest / "frontier.json", manifest)
    near = fr.near_head(table, reference)
    _write_json(metrics_path, {
        "enabled": True, "cost_unit": unit, "routing": manifest["routing"], "items": items,
        "frontier": [h["name"] for h in manifest["heads"] if h["on_frontier"]],
        "heads": {h["name"]: {k: v for k, v in h.items() if k not in ("name", "path")} for h in manifest["heads"]},
        "baselines": {n: {"reward": r["reward"], "cost_per_query": r["cost"]} for n, r in rows.items()
                      if r["kind"] == "baseline"},
        "near_cost_blind": near, "training": training,
    })
    return manifest


def title(cfg: TrinityConfig, manifest: dict) -> str:
    from trinity.simulated.references import is_simulated, label

    pool = cfg.pool
    where = f"{label(pool)}: " if is_simulated(pool) else ""
    return (f"{where}cost-quality frontier\non {manifest['items']} test items "
            f"({', '.join(manifest['suites'])}; {manifest['routing']} routing)")


def _disabled(dest: Path, metrics_path: Path, picture: Path) -> dict:
    from trinity.eval import frontier as fr

    note = "no cost frontier: evolve.cost_weights is empty"
    manifest = {"enabled": False, "reason": note, "heads": []}
    _write_json(dest / "frontier.json", manifest)
    _write_json(metrics_path, {"enabled": False})
    fr.placeholder(picture, note + " (README: The cost-quality frontier)")
    log.info("frontier: %s", note)
    return {"path": str(dest), "manifest": manifest, "table": None}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
