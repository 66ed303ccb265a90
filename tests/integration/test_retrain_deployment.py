"""Recurring retraining through the Prefect API of a real `prefect server` (flows/retrain.py behind the
`trinity-retrain` deployment): a better challenger is promoted and a running `trinity serve --registry`
answers with it without a restart; a worse one leaves the champion in place; a pool change maps the
champion's head rows by name; a run that fails leaves the registry unchanged. Each decision is a
`retrain-decision` markdown artifact.

The pool is the scripted loopback stub (model `right` answers every MMLU item correctly, the others never),
the coordinator a tiny random backbone (saved as a Hugging Face folder); one turn per episode, argmax routing, so a
coordinator's reward is exactly whether its head picks `right`."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import openai
import pytest
from omegaconf import OmegaConf
from pool_stub import StubServer, stub_pool_mapping
from process_support import wait_for

from trinity import config

pytestmark = pytest.mark.slow

POOL = ["wrong", "right", "other"]


def _steering(coord, items, protocol, model: str) -> np.ndarray:
    """Parameters whose head picks `model` as the Worker for every item: the model's row and the Worker's along the
    items' mean first-turn feature (the role too: with tied role logits, sampled routing would pick a Thinker or
    a Verifier on two items of three, and the one turn would give no answer)."""
    from trinity.contracts import ROLES
    from trinity.pipeline.coordinator_setup import first_turn_features

    features = first_turn_features(coord, items, protocol)
    direction = features.mean(axis=0)
    params = np.zeros(coord.num_params)
    head = params[coord.layout.svf_size:].reshape(coord.layout.head_shape)
    head[list(coord.pool_models).index(model)] = direction / np.linalg.norm(direction)
    head[len(coord.pool_models) + ROLES.index("worker")] = direction / np.linalg.norm(direction)
    return params


def test_scheduled_retraining_promotes_only_a_better_challenger_and_serving_follows(tmp_path, tiny_backbone_overrides,
                                                                                     deployed_flows):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from trinity.models.store import ModelRegistry
    from trinity.pipeline.coordinator_setup import build_coordinator
    from trinity.pipeline.suites import prepare_from_config
    from trinity.serve.server import ServerThread, build_app
    from trinity.tasks.prepare import load_items

    api = deployed_flows.api
    answers: dict[str, str] = {}

    def handler(body):
        user = body["messages"][-1]["content"]
        letter = next((a for key, a in answers.items() if key in user), "Z")
        return f"The answer is ({letter if body['model'] == 'right-id' else 'Z'})."

    with StubServer(handler) as stub:
        cfg = config.compose(["experiment=local_live", *tiny_backbone_overrides,
            "tasks.train=[mmlu]", "tasks.transfer=[]", "tasks.max_items_per_suite=60",
            "evolve.popsize=4", "evolve.generations=1", "evolve.episodes_per_candidate=2",
            "evolve.validation.every=1", "evolve.validation.n_items=4", "protocol.max_turns=1",
            "coordinator.features.normalize=none", "coordinator.routing=argmax", "serve.routing=argmax",
            "serve.registry_poll_s=0.2", "retrain.min_items=4", "retrain.items=null",
            f"paths.data={tmp_path}/data", f"paths.prepared={tmp_path}/data/prepared",
            f"paths.states={tmp_path}/data/states", f"paths.runs={tmp_path}/data/evolve",
            f"paths.eval={tmp_path}/data/eval", f"paths.ablations={tmp_path}/data/ablations",
            f"paths.metrics={tmp_path}/metrics", f"paths.reports={tmp_path}/reports",
            f"paths.cache={tmp_path}/cache", f"paths.ad_hoc_runs={tmp_path}/runs",
            f"paths.registry={tmp_path}/models",
        ])
        OmegaConf.set_struct(cfg, False)
        cfg.pool = OmegaConf.merge(stub_pool_mapping(stub.base_url, models=POOL), {"host": "127.0.0.1"})
        cfg = config.validate(cfg)
        prepare_from_config(cfg, cfg.paths.prepared)
        for it in load_items(cfg.paths.prepared, "mmlu"):
            ref = (json.loads(it.reference) if isinstance(it.reference, str) and it.reference.startswith("{")
                   else it.reference)
            answers[it.prompt.strip()[:200]] = ref["answer"] if isinstance(ref, dict) else ref
        test_items = load_items(cfg.paths.prepared, "mmlu", "test")
        assert len(test_items) >= 6, len(test_items)   # all discordant: exact McNemar p <= 2 / 2^6 < 0.05

        # the champion in place routes everything to a wrong model; a good coordinator to warm-start from
        coord = build_coordinator(cfg)
        coord.save(tmp_path / "bad" / "coordinator.safetensors", _steering(coord, test_items, cfg.protocol, "other"))
        coord.save(tmp_path / "good" / "coordinator.safetensors", _steering(coord, test_items, cfg.protocol, "right"))
        registry = ModelRegistry(tmp_path / "models")
        registry.promote(registry.register(tmp_path / "bad", {"source_run": "seeded"}).name, "the first champion")

        def params_file(name: str, **changes) -> str:
            path = tmp_path / f"{name}.yaml"
            path.write_text(config.to_yaml(config.with_values(cfg, changes)))
            return str(path)

        better = params_file("better",
                             **{"retrain.warm_start": str(tmp_path / "good"), "evolve.warm_start_sigma0": 1e-9})
        worse = params_file("worse", **{"retrain.warm_start": None})
        broken = params_file("broken", **{"retrain.warm_start": str(tmp_path / "nowhere")})
        extra = OmegaConf.merge(stub_pool_mapping(stub.base_url, models=POOL + ["extra"]), {"host": "127.0.0.1"})
        grown = config.with_values(cfg, {"pool": extra})
        (tmp_path / "grown.yaml").write_text(config.to_yaml(grown))

        app = build_app(cfg, registry=tmp_path / "models", backbone=coord.backbone)
        try:
            server = ServerThread(app).start()
            client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
            question = test_items[0].prompt

            def served() -> dict:
                reply = client.chat.completions.create(model="trinity",
                                                       messages=[{"role": "user", "content": question}])
                return reply.model_extra["trinity"]

            before = served()
            assert before["model_version"] == "v1" and before["turns"][0]["agent"] == "other"

            deployed_flows.wait_for_deployment("retrain/trinity-retrain")
            with temporary_settings({PREFECT_API_URL: api}):
                def retrain(params: str):
                    run = run_deployment("retrain/trinity-retrain", parameters={"params": params}, timeout=900,
                                         poll_interval=1)

                    async def artifacts():
                        async with get_client() as c:
                            found = await c.read_artifacts(
                                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
                            return {a.key: a for a in found if a.key}

                    return run, asyncio.run(artifacts())

                # 1. a better challenger (warm-started from the good coordinator) replaces the champion ...
                run, arts = retrain(better)
                assert run.state.is_completed(), (run.state, deployed_flows.deploy_log())
                assert registry.champion_name() == "v2", registry.history()
                assert registry.history()[-1]["action"] == "promote"
                assert "the challenger beats the champion" in registry.history()[-1]["reason"]
                assert "Retraining: v2 promoted" in str(arts["retrain-decision"].data)
                # nothing changed in the data since the pipeline prepared it: copied, not prepared again
                reuse = registry.show("v2").meta["data_reuse"]
                assert reuse["prepare"]["reused"] == {"mmlu": str(tmp_path / "data" / "prepared")}
                assert reuse["cache_states"]["computed"] == ["mmlu"]   # the pipeline cached no states here
                assert "`mmlu` unchanged" in str(arts["retrain-decision"].data)
                # ... and the running server answers with it, without a restart
                after = wait_for(lambda: (t := served())["model_version"] == "v2" and t, 30, "the server to swap")
                assert after["turns"][0]["agent"] == "right"

                # 2. a worse challenger (cold, x0 = 0: its head picks `wrong`) leaves the champion in place
                run, arts = retrain(worse)
                assert run.state.is_completed(), (run.state, deployed_flows.deploy_log())
                assert registry.champion_name() == "v2" and registry.history()[-1]["action"] == "keep"
                assert registry.history()[-1]["version"] == "v3"
                assert "the champion stays" in registry.history()[-1]["reason"]
                assert "not promoted; the champion stays" in str(arts["retrain-decision"].data)
                # the first retraining run's states are this run's too: same prompts and backbone
                states_reuse = registry.show("v3").meta["data_reuse"]["cache_states"]
                assert list(states_reuse["reused"]) == ["mmlu"] and states_reuse["computed"] == []
                assert "-retrain" in states_reuse["reused"]["mmlu"]
                assert served()["model_version"] == "v2"

                # 3. a pool change: the champion's rows follow the models by name, the new model's row is 0
                run, arts = retrain(str(tmp_path / "grown.yaml"))
                assert run.state.is_completed(), (run.state, deployed_flows.deploy_log())
                meta = registry.show("v4").meta
                assert meta["warm_start"]["added"] == ["extra"] and meta["warm_start"]["removed"] == []
                assert [k[0] for k in meta["warm_start"]["kept"]] == POOL
                assert any("mapped by model name" in n for n in meta["gate"]["notes"])
                assert ("pool: wrong right other -> wrong right other extra (added extra)"
                        in meta["differs_from_champion"])

                # 4. a run that fails leaves the registry as it was
                state = (tmp_path / "models" / "registry.json").read_bytes()
                run, _ = retrain(broken)
                assert run.state.is_failed(), run.state
                assert (tmp_path / "models" / "registry.json").read_bytes() == state
        finally:
            server.stop()
