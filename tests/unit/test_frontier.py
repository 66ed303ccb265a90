"""The cost-quality frontier: non-dominated marking, the table and budget rows, the config keys, the
serve-time choice (rules, request schema, a frontier server end to end) and a disabled stage's outputs.
The stage on the simulated pool: tests/integration/test_frontier_stage.py."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from trinity import config
from trinity.errors import ConfigError
from trinity.eval import frontier as fr
from trinity.eval.tables import results_frame

# ---------------------------------------------------------------------- non-dominated marking


def test_non_dominated_keeps_ties_a_single_point_and_drops_what_is_beaten():
    assert fr.non_dominated([]) == []
    assert fr.non_dominated([(0.4, 1.0)]) == [True]                           # a single point
    assert fr.non_dominated([(0.8, 1.0), (0.8, 1.0)]) == [True, True]         # identical: neither beats the other
    assert fr.non_dominated([(0.8, 1.0), (0.8, 2.0)]) == [True, False]        # same reward, dearer
    assert fr.non_dominated([(0.8, 1.0), (0.7, 1.0)]) == [True, False]        # same cost, worse
    assert fr.non_dominated([(0.9, 2.0), (0.7, 0.5), (0.6, 0.6), (0.8, 1.0)]) == [True, True, False, True]


def _rows(method: str, rewards: list[float], cost: float, tokens: int = 100) -> list[dict]:
    return [{"set": "test", "method": method, "suite": "mmlu", "item": f"mmlu/{i}", "repeat": 0, "reward": r,
             "turns": 1, "agents": ["a"], "roles": ["worker"], "prompt_tokens": tokens, "completion_tokens": 0,
             "cost_usd": cost, "paid_usd": cost, "calls": 1, "cache_hits": 0, "end_reason": "accept",
             "finish_reasons": ["stop"], "truncated_calls": 0} for i, r in enumerate(rewards)]


def _results() -> pl.DataFrame:
    return results_frame(_rows("frontier:cost_w0", [1, 1, 1, 0], 0.004, 400)
                         + _rows("frontier:cost_w20", [1, 1, 1, 0], 0.001, 100)
                         + _rows("frontier:cost_w5", [1, 0, 1, 0], 0.002, 200) + _rows("single:a", [1, 0, 0, 0], 0.0005)
                         + _rows("frontier:other", [1, 1, 1, 1], 0.0001))


def test_table_marks_heads_only_and_keeps_baselines_apart():
    table = fr.frontier_table(_results(), {"cost_w0": 0.0, "cost_w20": 20.0, "cost_w5": 5.0}, "usd", samples=200)
    heads = {r["name"]: r for r in fr.heads_of(table)}
    assert set(heads) == {"cost_w0", "cost_w20", "cost_w5"}            # a head not in the list is left out
    assert heads["cost_w20"]["on_frontier"] and not heads["cost_w0"]["on_frontier"]   # same reward, 4x the cost
    assert not heads["cost_w5"]["on_frontier"]
    assert heads["cost_w20"]["reward"] == 0.75 and heads["cost_w20"]["cost"] == pytest.approx(0.001)
    assert heads["cost_w20"]["reward_ci"] == "wilson"
    assert heads["cost_w20"]["reward_low"] < 0.75 < heads["cost_w20"]["reward_high"]
    baseline = table.filter(pl.col("kind") == "baseline").to_dicts()
    assert [b["name"] for b in baseline] == ["single:a"] and baseline[0]["on_frontier"] is None
    kt = fr.frontier_table(_results(), {"cost_w0": 0.0}, "ktokens", samples=200)
    assert fr.heads_of(kt)[0]["cost"] == pytest.approx(0.4)             # 400 tokens per query
    near = fr.near_head(table, "cost_w0")
    assert near["head"] == "cost_w20" and near["cost_ratio"] == pytest.approx(0.25) and near["goal_met"]


# ---------------------------------------------------------------------- the serve-time choice
POINTS = [("cheap", 0.60, 0.001), ("mid", 0.80, 0.003), ("best", 0.85, 0.008)]


def test_max_cost_usd_gets_the_best_reward_that_fits_and_below_the_cheapest_the_cheapest_with_a_note():
    assert fr.choose(POINTS, unit="usd", max_cost_usd=0.005) == ("mid", "max_cost_usd", None)   # between points
    assert fr.choose(POINTS, unit="usd", max_cost_usd=0.003)[0] == "mid"                         # exactly at one
    assert fr.choose(POINTS, unit="usd", max_cost_usd=1.0)[0] == "best"
    head, by, note = fr.choose(POINTS, unit="usd", max_cost_usd=0.0001)
    assert (head, by) == ("cheap", "max_cost_usd") and "below the cheapest" in note and "cheap" in note
    assert fr.choose(POINTS, unit="usd") == ("best", "default", None)                            # neither: best reward


def test_quality_levels_and_quality_within_a_budget():
    assert fr.choose(POINTS, unit="usd", quality="low") == ("cheap", "quality", None)
    assert fr.choose(POINTS, unit="usd", quality="high")[0] == "best"
    # middle of the reward range 0.60..0.85 is 0.725: mid (0.80) is 0.075 away, cheap (0.60) 0.125
    assert fr.choose(POINTS, unit="usd", quality="medium")[0] == "mid"
    assert fr.choose(POINTS, unit="usd", quality="high", max_cost_usd=0.004)[0] == "mid"
    assert fr.choose(POINTS, unit="usd", quality="medium", max_cost_usd=0.004)[0] == "cheap"   # 0.70: a tie -> cheaper
    assert fr.choose([("only", 0.5, 0.01)], unit="usd", quality="medium")[0] == "only"
    assert fr.pick([("b", 0.8, 0.01), ("a", 0.8, 0.01)], "high") == "a"        # identical points: by name
    head, by, note = fr.choose(POINTS, unit="ktokens", max_cost_usd=0.0001)
    assert (head, by) == ("best", "default") and "ktokens" in note           # tokens cannot be compared with dollars
    with pytest.raises(ValueError):
        fr.pick(POINTS, "extreme")


def test_budget_table_rows_follow_the_choice_rule():
    table = fr.frontier_table(results_frame(_rows("frontier:a", [1, 0, 0, 0], 0.001)
                                            + _rows("frontier:b", [1, 1, 1, 0], 0.003)
                                            + _rows("frontier:c", [1, 1, 1, 0], 0.003)), {"a": 1.0, "b": 0.0, "c": 5.0},
                              "usd", samples=100)
    lines = fr.budget_table(table)
    assert lines[2].startswith("| below $0.001000 | `a` (1), over budget |")
    assert lines[3].startswith("| $0.001000 to $0.003000 | `a` (1) |") and "low" in lines[3]
    assert lines[4].startswith("| $0.003000 or more | `b` (0) |") and "high" in lines[4]   # b and c tie: b first
    assert len(lines) == 5


# ---------------------------------------------------------------------- configuration


def test_cost_weights_keys_are_checked_named_and_leave_the_main_run_key_alone():
    from trinity.pipeline import frontier_stage
    from trinity.pipeline.evolution_inputs import config_fingerprint

    base = config.load(None, ["experiment=routing_benchmark"])
    assert list(base.evolve.cost_weights) == [] and base.evolve.cost_weights_unit == "auto"
    cfg = config.load(None, ["experiment=routing_benchmark", "evolve.cost_weights=[0,20,100]"])
    assert config_fingerprint(cfg, 10) == config_fingerprint(base, 10)
    assert frontier_stage.cost_unit(cfg) == "usd"                             # every simulated model has a price
    variants = frontier_stage.variants(cfg)
    assert list(variants) == ["cost_w20", "cost_w100"]                        # 0 is the main run itself
    overrides, variant = variants["cost_w20"]
    assert overrides == {"evolve.fitness.cost_weight": 20.0, "evolve.fitness.cost_unit": "usd"}
    assert variant.evolve.fitness.cost_weight == 20.0 and variant.evolve.popsize == cfg.evolve.popsize
    free = ["evolve.cost_weights=[1]", "pool.models.smollm2-135m.price_in_per_mtok=0",
            "pool.models.smollm2-135m.price_out_per_mtok=0"]
    # a free model: dollars would mislead
    assert frontier_stage.cost_unit(config.load(None, ["experiment=local_small", *free])) == "ktokens"
    assert frontier_stage.cost_unit(config.load(None, ["experiment=local_live", *free,
                                                         "evolve.cost_weights_unit=usd"])) == "usd"
    for bad in ("[-1]", "[1,1]", "[x]"):
        with pytest.raises(ConfigError, match=r"evolve\.cost_weights"):
            config.compose(["experiment=local_live", f"evolve.cost_weights={bad}"])
    with pytest.raises(ConfigError, match=r"evolve\.cost_weights_unit"):
        config.compose(["experiment=local_live", "evolve.cost_weights_unit=eur"])


# ---------------------------------------------------------------------- the request schema


def test_quality_is_validated_and_needs_a_frontier_server():
    import dataclasses

    from trinity.serve.schema import QUALITY_LEVELS, RequestError, parse_chat_request
    from trinity.serve.settings import ServeSettings

    assert QUALITY_LEVELS == fr.QUALITY_LEVELS
    plain = ServeSettings.from_config(config.load(None, ["experiment=local_live"]))
    front = dataclasses.replace(plain, frontier=True)
    body = {"model": "trinity", "messages": [{"role": "user", "content": "hi"}]}
    assert parse_chat_request({**body, "trinity": {"quality": "medium"}}, front).quality == "medium"
    assert parse_chat_request(body, front).quality is None
    for value, settings in (("best", front), (3, front), (None, plain)):
        extra = {"quality": value} if value is not None else {"quality": "low"}
        with pytest.raises(RequestError) as e:
            parse_chat_request({**body, "trinity": extra}, settings)
        assert e.value.status == 400 and e.value.param == "trinity.quality"


# ---------------------------------------------------------------------- a frontier folder


def _manifest(heads: list[dict], unit: str = "usd") -> dict:
    return {"enabled": True, "cost_unit": unit, "routing": "argmax", "items": 4, "suites": ["mmlu"],
            "cost_weights": [5.0], "reference_head": "cost_w0", "heads": heads}


def _head(name: str, weight: float, reward: float, cost: float, on: bool = True) -> dict:
    return {"name": name, "cost_weight": weight, "path": f"{name}/coordinator.safetensors", "reward": reward,
            "reward_ci": [reward - 0.1, reward + 0.1], "cost_per_query": cost, "cost_ci": [cost, cost],
            "cost_per_query_usd": cost, "tokens_per_query": 100.0, "on_frontier": on}


def test_a_served_frontier_loads_only_frontier_heads_and_refuses_what_is_not_one(tmp_path):
    from trinity.serve.frontier_heads import ServedFrontier

    folder = tmp_path / "frontier"
    with pytest.raises(ConfigError, match="--frontier.*no frontier.json"):
        ServedFrontier.load(folder)
    folder.mkdir()
    (folder / "frontier.json").write_text(json.dumps({"enabled": False, "reason": "evolve.cost_weights is empty"}))
    with pytest.raises(ConfigError, match="holds no frontier.*cost_weights"):
        ServedFrontier.load(folder)
    (folder / "frontier.json").write_text(json.dumps(_manifest([_head("cost_w0", 0, 0.8, 0.004),
                                                                _head("cost_w5", 5, 0.7, 0.005, on=False)])))
    with pytest.raises(ConfigError, match="cost_w0's coordinator .* is missing"):
        ServedFrontier.load(folder)
    for name in ("cost_w0", "cost_w5"):
        (folder / name).mkdir()
        (folder / name / "coordinator.safetensors").write_bytes(b"")
    served = ServedFrontier.load(folder)
    assert [h.name for h in served.heads] == ["cost_w0"] and served.cost_unit == "usd"


def test_a_frontier_server_picks_a_head_per_request_and_names_it_in_the_trace(tmp_path):
    """The CLI's path (build_app with a frontier folder): heads saved by Coordinator.save over a tiny
    backbone; the cheap head's agent row is aligned with the request's first-turn feature, so it opens
    with `gamma`, while the zero head opens with the first model."""
    import openai
    from coordinator_support import tiny_backbone
    from pool_stub import StubServer
    from serve_support import echo_roles, serve_cfg

    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.episodes.protocol import first_turn_transcript
    from trinity.serve.server import ServerThread, build_app

    prompt = "What is 6*7? REQ-front"
    with StubServer(echo_roles) as stub:
        cfg = serve_cfg(stub.base_url, tmp_path / "cache")
        coord = coordinator_from_config(cfg, backbone=tiny_backbone())
        transcript = first_turn_transcript(ProtocolConfig.from_config(cfg.protocol), prompt)
        feature = np.asarray(coord.precompute([transcript])[0])
        cheap = np.zeros(coord.num_params)
        head = cheap[-(3 + 3) * feature.size:].reshape(3 + 3, feature.size)   # the head's (L + 3) x d block
        head[2] = 50.0 * feature / float(feature @ feature)                 # agent gamma
        folder = tmp_path / "frontier"
        quality = np.zeros(coord.num_params)
        quality[-(3 + 3) * feature.size:].reshape(3 + 3, feature.size)[0] = 50.0 * feature / float(feature @ feature)
        for name, params in (("cost_w0", quality), ("cost_w50", cheap)):                 # alpha / gamma
            coord.save(folder / name / "coordinator.safetensors", params)
        (folder / "frontier.json").write_text(json.dumps(_manifest([_head("cost_w0", 0, 0.85, 0.004),
                                                                    _head("cost_w50", 50, 0.80, 0.001)])))
        with ServerThread(build_app(cfg, frontier=folder, backbone=tiny_backbone())) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)

            def ask(**trinity):
                reply = client.chat.completions.create(model="trinity", messages=[{"role": "user", "content": prompt}],
                                                       extra_body={"trinity": trinity} if trinity else None)
                return reply.model_extra["trinity"]

            default, budget, low, below = ask(), ask(max_cost_usd=0.002), ask(quality="low"), ask(max_cost_usd=0.0005)
            with pytest.raises(openai.BadRequestError, match="trinity.quality"):
                ask(quality="cheapest")
    assert (default["frontier"]["head"], default["frontier"]["chosen_by"]) == ("cost_w0", "default")
    assert default["turns"][0]["agent"] == "alpha"
    assert (budget["frontier"]["head"], budget["frontier"]["chosen_by"]) == ("cost_w50", "max_cost_usd")
    assert budget["turns"][0]["agent"] == "gamma"                             # the cheap head's own parameters
    assert low["frontier"]["head"] == "cost_w50" and low["frontier"]["quality"] == "low"
    assert below["frontier"]["head"] == "cost_w50" and "below the cheapest" in below["frontier"]["note"]


def test_frontier_stage_off_writes_what_dvc_expects(tmp_path):
    from trinity.pipeline import frontier_stage

    cfg = config.load(None, ["experiment=local_live", f"paths.frontier={tmp_path}/frontier",
                             f"paths.metrics={tmp_path}/metrics",
                             f"paths.reports={tmp_path}/reports", f"paths.runs={tmp_path}/none"])
    out = frontier_stage.run(cfg)
    assert out["manifest"]["enabled"] is False
    assert json.loads((tmp_path / "metrics" / "frontier.json").read_text()) == {"enabled": False}
    assert (tmp_path / "reports" / "frontier.png").is_file()
    with pytest.raises(ConfigError, match="holds no frontier"):
        from trinity.pipeline.eval_arguments import check_frontier

        check_frontier(tmp_path / "frontier", list(cfg.pool.models))
