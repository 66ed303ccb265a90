"""The cost-quality frontier end to end: the frontier stage on the simulated pool (in process, a tiny
backbone) with tiny budgets, including a rerun that makes no pool call, and `trinity plan` counting the
frontier. Marking, tables, config keys and the serve-time choice: tests/unit/test_frontier.py."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from trinity import config
from trinity.pipeline.workspace import timings_dir

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------------- the stage on the simulated pool


class PricedSimulatedPool:
    """The simulated pool in process, as the pool client: tokens from its replies, dollars at the profile's
    prices; counts the calls that reach it."""

    replay = None   # no recording

    def __init__(self, cfg):
        from trinity.simulated.launcher import simulated_world
        from trinity.simulated.server import SimulatedPool

        self.sim = SimulatedPool(simulated_world(cfg.pool))
        self.models = {name: m for name, m in cfg.pool.models.items()}
        self.calls = 0

    def list_price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        m = self.models[model]
        return (prompt_tokens * float(m.price_in_per_mtok) + completion_tokens * float(m.price_out_per_mtok)) / 1e6

    async def chat(self, model, messages, *, sample_index=0, max_tokens=None, temperature=None, role=None,
                   context=None):
        from trinity.pool.types import CallResult

        self.calls += 1
        reply = await self.sim.complete({"model": self.models[model].model_id, "messages": messages,
                                         "seed": sample_index, "max_tokens": max_tokens})
        usage, choice = reply["usage"], reply["choices"][0]
        cost = self.list_price(model, usage["prompt_tokens"], usage["completion_tokens"])
        return CallResult(model=model, text=choice["message"]["content"], ok=True, prompt_tokens=usage["prompt_tokens"],
                          completion_tokens=usage["completion_tokens"], cost_usd=cost, price_usd=cost,
                          finish_reason=choice["finish_reason"])

    async def aclose(self) -> None:
        pass

    def totals(self) -> dict:
        return {"calls": self.calls}


@pytest.fixture()
def simulated(tmp_path, monkeypatch):
    from coordinator_support import tiny_backbone

    from trinity.coordinator import coordinator as coordinator_module
    from trinity.pipeline.cache_states_stage import run as cache_states
    from trinity.pipeline.suites import prepare_from_config
    from trinity.pool.client import PoolClient

    cfg = config.load(None, [
        "experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]", "tasks.max_items_per_suite=16",
        "evolve.popsize=4", "evolve.generations=2", "evolve.episodes_per_candidate=2", "evolve.validation.every=1",
        "evolve.validation.n_items=4", "evolve.cost_weights=[0,200]", "protocol.max_turns=3",
        "eval.items_per_suite=3", "eval.sets=[test]", "eval.methods=[single_worker,random]",
        "coordinator.backbone.id=tiny-llama",
        f"paths.prepared={tmp_path}/data/prepared", f"paths.states={tmp_path}/data/states",
        f"paths.runs={tmp_path}/data/evolve", f"paths.frontier={tmp_path}/data/frontier",
        f"paths.eval={tmp_path}/data/eval", f"paths.metrics={tmp_path}/metrics", f"paths.reports={tmp_path}/reports",
        f"paths.cache={tmp_path}/cache"])
    monkeypatch.setattr(coordinator_module, "load_backbone", lambda *a, **k: tiny_backbone())
    prepare_from_config(cfg, cfg.paths.prepared)
    pools: list[PricedSimulatedPool] = []

    def make_pool(*args, **kwargs):
        pools.append(PricedSimulatedPool(cfg))
        return pools[-1]

    monkeypatch.setattr(PoolClient, "from_config", staticmethod(make_pool))
    cache_states(cfg)
    yield cfg, pools


def test_frontier_stage_end_to_end_and_a_rerun_makes_no_pool_call(simulated):
    from trinity.pipeline import ablate_stage, evaluate_stage, evolve_stage, frontier_stage

    cfg, pools = simulated
    with pytest.raises(frontier_stage.FrontierInputError, match="run the evolve stage first"):
        frontier_stage.run(cfg)
    evolve_stage.run(cfg)
    out = frontier_stage.run(cfg)
    folder = Path(cfg.paths.frontier)
    manifest = json.loads((folder / "frontier.json").read_text())
    assert manifest == out["manifest"] and manifest["cost_unit"] == "usd" and manifest["routing"] == "argmax"
    assert [h["name"] for h in manifest["heads"]] == ["cost_w0", "cost_w200"]
    assert manifest["items"] == 6 and manifest["suites"] == ["gsm8k", "mmlu"]
    for h in manifest["heads"]:
        assert (folder / h["path"]).is_file() and h["reward_ci"][0] <= h["reward"] <= h["reward_ci"][1]
        assert h["cost_per_query"] > 0 and h["cost_ci"][0] <= h["cost_per_query"] <= h["cost_ci"][1]
    assert any(h["on_frontier"] for h in manifest["heads"])
    assert ablate_stage.load_overrides(folder / "cost_w200") == {"evolve.fitness.cost_weight": 200.0,
                                                                 "evolve.fitness.cost_unit": "usd"}
    assert ablate_stage.load_overrides(folder / "cost_w0") == {}
    table = pl.read_parquet(folder / "frontier.parquet")
    baselines = set(table.filter(pl.col("kind") == "baseline")["name"])
    assert baselines == {*(f"single:{m}" for m in cfg.pool.models), "random", f"moa:{next(iter(cfg.pool.models))}"}
    metrics = json.loads((Path(cfg.paths.metrics) / "frontier.json").read_text())
    assert metrics["enabled"] and set(metrics["heads"]) == {"cost_w0", "cost_w200"}
    train = metrics["training"]["cost_w200"]
    assert train["generations_completed"] == 2 and train["calls"] > 0 and "resumed" not in train
    facts = timings_dir(cfg, "frontier", "cost_w200") / "training.json"
    assert json.loads(facts.read_text())["resumed"] is False
    assert (Path(cfg.paths.reports) / "frontier.png").stat().st_size > 0

    # the rerun: the weight resumes from its finished checkpoint, every chunk from the eval cache
    before = len(pools)
    again = frontier_stage.run(cfg)
    assert sum(p.calls for p in pools[before:]) == 0
    assert json.loads(facts.read_text())["resumed"] is True
    assert again["table"].equals(out["table"])

    # the evaluate stage (same config) reports which head to serve, and finds the baselines' chunks done
    before = len(pools)
    ev = evaluate_stage.run(cfg, frontier_path=folder)
    assert sum(p.calls for p in pools[before:]) == 0
    report = Path(ev["report"]).read_text()
    assert "## Which head to serve for a budget" in report and "| budget per query |" in report
    assert report.index("## Which head to serve") > report.index("## Held-out test split")


def test_plan_counts_the_frontier_and_the_cli_takes_a_frontier():
    from trinity.cli import build_parser
    from trinity.plan.build import build_plan

    plan = build_plan(config.load(None, ["experiment=routing_benchmark", "evolve.cost_weights=[0,20]",
                                         "evolve.generations=2"]))
    parts = [p["part"] for s in plan["stages"] if s["stage"] == "frontier" for p in s["parts"]]
    assert parts[:3] == ["cost_w20", "test cost_w0", "test cost_w20"] and "test random" in parts
    assert "frontier" not in [s["stage"]
                              for s in build_plan(config.load(None, ["experiment=routing_benchmark"]))["stages"]]
    args = build_parser().parse_args(["serve", "--frontier", "data/frontier"])
    assert args.frontier == "data/frontier" and args.coordinator is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--frontier", "a", "--coordinator", "b"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve"])
    assert build_parser().parse_args(["eval", "--coordinator", "c", "--frontier", "f"]).frontier == "f"
