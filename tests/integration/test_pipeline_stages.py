"""The pipeline end to end on a scripted pool served over real loopback HTTP and a tiny random backbone
(the real one has its own tests; here only the wiring matters): prepare -> cache_states -> evolve -> evaluate, plus the
Prefect flow wrapper."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer, stub_pool_mapping
from process_support import prefect_server

from trinity import config
from trinity.tasks.prepare import load_items

pytestmark = pytest.mark.slow


def _answer_for(item) -> str:
    ref = item.reference
    if isinstance(ref, str):
        with contextlib.suppress(ValueError):
            ref = json.loads(ref)
    if item.suite == "gsm8k":
        value = ref["answer"] if isinstance(ref, dict) else ref
        return f"Working it out. The answer is {value}. <idea>computed it</idea>"
    letter = ref["answer"] if isinstance(ref, dict) else ref
    return f"The answer is ({letter}). <idea>recalled it</idea>"


def _wrong_for(item) -> str:
    return "I am not sure. The answer is 987654321 (Z). <idea>a guess</idea>"


@pytest.fixture(scope="module")
def run_cfg(tmp_path_factory, tiny_backbone_overrides):
    tmp = tmp_path_factory.mktemp("pipe")
    cfg = config.compose(["experiment=local_live", *tiny_backbone_overrides,
        "tasks.train=[mmlu,gsm8k]", "tasks.transfer=[gpqa_diamond]", "tasks.max_items_per_suite=20",
        "evolve.popsize=4", "evolve.generations=2", "evolve.episodes_per_candidate=4",
        "evolve.validation.every=1", "evolve.validation.n_items=4", "protocol.max_turns=3",
        "eval.items_per_suite=3", "eval.methods=[trinity,single_worker,random,loop]",
        "eval.bootstrap_samples=200", "eval.sets=[validation,test]",
        f"paths.data={tmp}/data", f"paths.prepared={tmp}/data/prepared", f"paths.states={tmp}/data/states",
        f"paths.runs={tmp}/data/evolve", f"paths.eval={tmp}/data/eval", f"paths.metrics={tmp}/metrics",
        f"paths.reports={tmp}/reports", f"paths.cache={tmp}/cache",
    ])
    return cfg


@pytest.fixture(scope="module")
def prefect_harness(tmp_path_factory):
    """One Prefect server for the flow tests of this module (starting one takes most of a test)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with prefect_server(tmp_path_factory.mktemp("prefect")) as api, temporary_settings({PREFECT_API_URL: api}):
        yield


def test_prepare_cache_states_evolve_evaluate_on_a_scripted_pool(run_cfg):
    from trinity.pipeline import cache_states_stage, evaluate_stage, evolve_stage
    from trinity.pipeline.suites import prepare_from_config

    cfg = run_cfg
    prepare_from_config(config.typed(cfg), cfg.paths.prepared)
    items = {}
    for suite in ("mmlu", "gsm8k", "gpqa_diamond"):
        for it in load_items(cfg.paths.prepared, suite):
            items[it.prompt.strip()[:200]] = it

    def handler(body):
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if "Verifier" in system:
            return "ACCEPT"
        if "Thinker" in system:
            return "<suggestion>check the arithmetic</suggestion><suggested_role>verifier</suggested_role>"
        item = next((it for key, it in items.items() if user.startswith(key)), None)
        if item is None:
            return "no idea"
        return _answer_for(item) if body["model"] == "oracle-id" else _wrong_for(item)

    with StubServer(handler) as server:
        pool = stub_pool_mapping(server.base_url, models=["oracle", "guesser", "other"])
        OmegaConf.set_struct(cfg, False)
        cfg.pool = OmegaConf.merge(pool, {"host": "127.0.0.1"})
        cfg = config.validate(cfg)
        told = []
        states = cache_states_stage.run(cfg, on_work=lambda label, done, total: told.append((done, total)))
        assert told[-1] == (states["count"], states["count"])
        assert states["count"] == sum(len(load_items(cfg.paths.prepared, s))
                                      for s in ("mmlu", "gsm8k", "gpqa_diamond"))

        work = []
        out = evolve_stage.run(cfg, on_work=lambda label, done, total: work.append((label, done, total)))
        last = {label: (done, total) for label, done, total in work}
        assert last["generation 0: episodes"] == (16, 16) and last["generation 1: episodes"] == (16, 16)
        assert any(label.startswith("generation 1: validation") for label in last)
        gens = pl.read_parquet(f"{cfg.paths.runs}/generations.parquet")
        eps = pl.read_parquet(f"{cfg.paths.runs}/episodes.parquet")
        assert gens.height == 2
        assert eps.filter(pl.col("candidate") >= 0).height == 2 * 4 * 4
        assert out["result"].generations_completed == 2
        assert (cfg.paths.runs + "/coordinator")
        assert json.loads(Path(f"{cfg.paths.metrics}/evolve.json").read_text())

        ev = evaluate_stage.run(cfg)
        summary = ev["summary"]
        val = summary.filter((pl.col("set") == "validation") & (pl.col("suite") == "all"))
        rewards = dict(zip(val["method"], val["mean_reward"], strict=True))
        assert rewards["single:oracle"] == 1.0
        assert rewards["single:guesser"] == 0.0 and rewards["single:other"] == 0.0
        assert {"trinity", "random", "loop:oracle"} <= set(rewards)
        report = Path(ev["report"]).read_text()
        assert "single:oracle" in report and "TRINITY" in report
        metrics = json.loads(Path(f"{cfg.paths.metrics}/eval.json").read_text())
        assert metrics["validation/all/single:oracle"] == 1.0


def test_prepare_flow_runs_under_prefect(run_cfg, tmp_path, prefect_harness):
    from flows.prepare import prepare_flow

    params = tmp_path / "params.yaml"
    cfg = run_cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.paths.prepared = str(tmp_path / "prepared")
    params.write_text(config.to_yaml(cfg))
    manifest = prepare_flow(params=str(params))
    assert set(manifest["suites"]) == {"mmlu", "gsm8k", "gpqa_diamond"}
    assert (tmp_path / "prepared" / "mmlu.parquet").exists()


@pytest.mark.parametrize("kind", ["dask", "threads"])
def test_rollouts_on_the_task_runner_match_the_inline_run(run_cfg, prefect_harness, kind):
    """runner.kind=dask: candidate rollouts run as Prefect tasks on a local Dask cluster (the worker process
    builds its own runtime, pool client and coordinator, from the run's description) and give the same traces
    as inline; so do they on the default thread pool, where the task's arguments go quoted (handed over without
    Prefect's walk: the task runs on the stage's own runtime)."""
    import numpy as np
    from prefect import flow

    from flows._common import rollout_runner
    from trinity.pipeline import cache_states_stage
    from trinity.pipeline import items as item_sel
    from trinity.pipeline.population import rollout_candidate
    from trinity.pipeline.stage_runtime import RuntimeDescription, TaskRuntime, open_stage_runtime
    from trinity.pipeline.suites import prepare_from_config

    cfg = run_cfg.copy()
    OmegaConf.set_struct(cfg, False)
    if not list(Path(cfg.paths.prepared).glob("*.parquet")):
        prepare_from_config(config.typed(cfg), cfg.paths.prepared)
    if not (Path(cfg.paths.states) / "mmlu.safetensors").exists():   # the feature statistics read them
        cache_states_stage.run(config.typed(cfg))
    uids = [it.uid for it in load_items(cfg.paths.prepared, "mmlu", "train")[:2]]
    by_uid = {it.uid: it for it in item_sel.load_split(config.typed(cfg), ["mmlu"], "train")}

    def on(runtime):
        return TaskRuntime(RuntimeDescription.of(runtime), runtime, by_uid)

    with StubServer(lambda body: "The answer is (B). <idea>b</idea>" if "Worker" in body["messages"][0]["content"]
                    else "ACCEPT") as server:
        cfg.pool = OmegaConf.merge(stub_pool_mapping(server.base_url, models=["a", "b"]), {"host": "127.0.0.1"})
        cfg.runner.kind = kind
        cfg.runner.dask_workers = 1   # one worker process shows it: it builds its own pool client and coordinator
        cfg = config.validate(cfg)
        rng = np.random.default_rng(0)
        with open_stage_runtime(cfg) as runtime:
            cands = [(rng.normal(size=runtime.coordinator.num_params) * 0.5).tolist() for _ in range(2)]
            inline = [rollout_candidate(on(runtime), 0, c, x, uids, 1) for c, x in enumerate(cands)]

        @flow
        def rollouts():
            # the stage's runtime opens inside the task runner, so on Dask the workers learn how to build theirs
            with rollout_runner(cfg) as submit, open_stage_runtime(cfg) as runtime:
                futures = [submit(rollout_candidate, on(runtime), 0, c, x, uids, 1) for c, x in enumerate(cands)]
                return [f.result() for f in futures]

        on_runner = rollouts()
    assert len(on_runner) == 2 and all(len(t) == 2 for t in on_runner)
    for a, b in zip(on_runner, inline, strict=True):
        assert [(x.episode, [(t.agent, t.role) for t in x.turns], x.reward) for x in a] == \
               [(x.episode, [(t.agent, t.role) for t in x.turns], x.reward) for x in b]
