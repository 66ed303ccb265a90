"""README's serving journey as printed: after `make run`, the command of README's "Serving" block (`make serve`)
serves data/evolve/coordinator over the live pool the default was trained on, and README's python client
snippet, run as it stands (its base_url and port), gets an answer.

In a temporary copy of the project (tests/journey_support.py): the default experiment is composed as shipped
(experiment=local_agents: pool=recorded_agents, the agents pool replayed), with two changes to the copy's
installation, never to the commands: conf/pool/local_agents.yaml, the live pool, names the same three agents
at a loopback OpenAI-compatible server instead of the llama.cpp server of the 1.5B model, and the default
coordinator's backbone is the tests' tiny random Llama. data/evolve/coordinator is a coordinator of the
default's shape saved as the pipeline saves one (that pool, Worker and Verifier, rebalanced features fitted on
a few prompts, a small random head): what `make run` leaves there, without its minutes. The real pool and
backbone serve in tests/integration/test_serve_local.py (slow)."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from journey_support import (
    REPO,
    SERVE_PORT,
    project_copy,
    section_blocks,
    serve_port,
    stop_group,
    use_backbone,
    user_environment,
)
from omegaconf import OmegaConf
from pool_stub import StubServer, completion
from process_support import wait_for

pytestmark = pytest.mark.integration

README = REPO / "README.md"


def agents_at(conf: Path, base_url: str) -> list[str]:
    """conf/pool/local_agents.yaml of the copy: the same agents, in the same order with the same setups, served
    by an OpenAI-compatible server at `base_url`."""
    path = conf / "pool" / "local_agents.yaml"
    pool = OmegaConf.load(path)
    for key in ("host", "state_dir", "startup_timeout_s"):
        del pool[key]
    pool.provider = "openai_compatible"
    for name, model in pool.models.items():
        for key in ("asset", "port", "n_ctx", "n_parallel", "n_threads"):
            del model[key]
        model.model_id, model.base_url = f"{name}-id", base_url
    OmegaConf.save(pool, path)
    return [str(m) for m in pool.models]


def local_model(body: dict):
    """The agents' server: a Worker works out 17 * 23 (a program for the agent that answers with one), a
    Verifier accepts."""
    if body["messages"][0]["content"].startswith("You are the Worker"):
        return completion("```python\nprint(17 * 23)\n```\n17 * 23 = 391. The answer is 391.\n<idea>multiply</idea>",
                          prompt_tokens=40, completion_tokens=30)
    return completion("ACCEPT", prompt_tokens=60, completion_tokens=1)


def save_default_coordinator(conf: Path, folder: Path, cache: Path) -> list[str]:
    """A coordinator for the default experiment as the copy composes it, saved in `folder`; returns its agents."""
    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.coordinator.feature_norm import FeatureNorm
    from trinity.pipeline.coordinator_setup import first_turn_features

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(config.CONF_ENV, str(conf))
        cfg = config.load(None, [f"paths.cache={cache}"])
    features = cfg.coordinator.features
    prompts = [SimpleNamespace(prompt=f"Question {i}: what is {i} + {2 * i}?") for i in range(12)]
    coord = coordinator_from_config(cfg, fit_norm=lambda c: FeatureNorm.fit(
        first_turn_features(c, prompts, cfg.protocol), keep_shared=features.normalize.value == "rebalance",
        rank=features.rank))
    try:
        coord.save(folder / "coordinator.safetensors", np.random.default_rng(0).normal(0, 0.1, coord.num_params))
    finally:
        coord.service.close()
    return list(cfg.pool.models)


def test_make_serve_serves_the_default_over_its_live_pool_and_answers_the_readme_client(tmp_path,
                                                                                        tiny_backbone_overrides):
    blocks = section_blocks(README, "## Serving")
    command = next(body for lang, body in blocks if lang == "bash").strip()
    client = next(body for lang, body in blocks if lang == "python")
    assert command.splitlines()[0].split("#")[0].split() == ["make", "serve"], command
    assert f":{SERVE_PORT}/v1" in client

    project = project_copy(tmp_path / "checkout")
    use_backbone(project / "conf", Path(tiny_backbone_overrides[-1].split("=", 1)[1]))
    with StubServer(local_model) as pool, serve_port():
        agents = agents_at(project / "conf", pool.base_url)
        assert save_default_coordinator(project / "conf", project / "data/evolve/coordinator",
                                        tmp_path / "cache") == agents
        log = tmp_path / "serve.log"
        with open(log, "w") as out:
            served = subprocess.Popen(["bash", "-c", command], cwd=project, stdout=out, stderr=subprocess.STDOUT,
                                      env=user_environment(TRINITY_CONF_DIR=str(project / "conf")),
                                      start_new_session=True)
        try:
            try:
                wait_for(lambda: httpx.get(f"http://127.0.0.1:{SERVE_PORT}/health", timeout=2).json()["status"] == "ok",
                         240, f"`{command}` to serve", (served,))
            except AssertionError as e:
                raise AssertionError(f"{e}:\n{log.read_text()[-5000:]}") from None
            text = log.read_text()
            assert "experiment=local_agents" in text                           # the default, as make serve runs it
            assert f"serving over its live pool, the models it was recorded from ({', '.join(agents)})" in text

            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(client, f"{README}: Serving", "exec"), {})
            *answer, trace = printed.getvalue().strip().splitlines()      # the content (lines), then the trace
            assert "391" in "\n".join(answer), printed.getvalue()
            assert "'turns'" in trace and "'worker'" in trace, trace[:2000]
            assert pool.count > 0                                              # over the live pool
        finally:
            stop_group(served)
