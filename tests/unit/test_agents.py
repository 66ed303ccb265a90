"""Agents (trinity.pool.agents): setups of one model over one server, the program-of-thought tool's
answers, and recordings of agents that replay and walk exactly. A hostile program in the sandbox:
tests/integration/test_agents_sandbox.py."""

from __future__ import annotations

import asyncio

import pytest
from pool_stub import StubServer, completion, stub_pool_cfg, stub_pool_mapping
from recording_support import grade, recording_cfg, write_prepared

from trinity.config import compose, load, with_values
from trinity.config_schema.pool import AgentSetup
from trinity.errors import ConfigError
from trinity.pool.agents import agent_request, program_of, python_tool, request_model
from trinity.pool.client import PoolClient
from trinity.pool.servers import server_specs
from trinity.sandbox import SandboxLimits, run_python
from trinity.tasks.graders.choice import extract_choice
from trinity.tasks.graders.math_answer import extract_math_answer

TASK = [{"role": "system", "content": "You are the Worker."}, {"role": "user", "content": "What is 6 x 7?"}]


def test_agents_that_give_one_port_share_one_server_and_must_agree_on_it():
    cfg = load(None, ["experiment=local_agents", "pool=local_agents"])
    specs = server_specs(cfg.pool)
    assert len(cfg.pool.models) == 3 and len(specs) == 1
    assert specs[0].name == "qwen-direct" and specs[0].asset == "qwen2.5-coder-1.5b-instruct"
    cfg = with_values(cfg, {"pool.models.qwen-steps.n_threads": 1})
    with pytest.raises(ConfigError, match="n_threads"):
        server_specs(cfg.pool)


def test_an_agent_setup_shapes_only_its_own_roles():
    setup = AgentSetup(instructions={"worker": "Answer with a program."}, max_tokens={"worker": 99}, tool="python")
    worker = agent_request(setup, "worker", TASK, 384)
    assert worker.messages[0] == TASK[0]                       # the role's system prompt is untouched
    assert worker.messages[-1]["content"] == "What is 6 x 7?\n\nAnswer with a program."
    assert worker.max_tokens == 99 and worker.tool == "python"
    verifier = agent_request(setup, "verifier", TASK, 16)
    assert verifier.messages == TASK and verifier.max_tokens == 16 and verifier.tool is None
    judge = agent_request(setup, None, TASK, 512)               # a call outside the protocol
    assert judge.messages == TASK and judge.max_tokens == 512 and judge.tool is None
    assert TASK[-1]["content"] == "What is 6 x 7?"              # the caller's messages are not changed
    assert agent_request(AgentSetup(), "worker", TASK, 7).messages == TASK
    assert request_model("m", None) == "m" and request_model("m", "python") != "m"


def test_unknown_setup_keys_and_tools_are_refused():
    with pytest.raises(ConfigError, match="instructions"):
        compose(["experiment=local_agents", "pool=local_agents", "+pool.models.qwen-direct.setup.instructions.boss=x"])
    with pytest.raises(ConfigError, match="max_tokens"):
        compose(["experiment=local_agents", "pool=local_agents", "pool.models.qwen-direct.setup.max_tokens.worker=0"])
    cfg = load(None, ["experiment=local_agents", "pool=local_agents", "pool.models.qwen-python.setup.tool=shell"])
    from trinity.pool.errors import PoolConfigError

    with pytest.raises(PoolConfigError, match="unknown agent tool 'shell'"):
        PoolClient.from_config(cfg.pool)


def test_the_client_sends_each_agents_setup_to_the_one_server():
    def reply(body):
        return completion("```python\nprint(6 * 7)\n```\n<idea>multiply</idea>", completion_tokens=9)

    models = {"plain": {}, "brief": {"setup": {"instructions": {"worker": "Be brief."}, "max_tokens": {"worker": 32}}},
              "coder": {"setup": {"tool": "python"}}}
    with StubServer(reply) as server:
        cfg = stub_pool_cfg(server.base_url, models=models, model_id="same-model")
        client = PoolClient.from_config(cfg)

        async def go():
            out = {}
            for name in models:
                out[name] = await client.chat(name, TASK, role="worker", max_tokens=200)
            out["verifier"] = await client.chat("brief", TASK, role="verifier", max_tokens=16)
            await client.aclose()
            return out

        results = asyncio.run(go())
    bodies = [r.json for r in server.requests if r.path.endswith("/chat/completions")]
    assert {b["model"] for b in bodies} == {"same-model"}
    plain, brief, coder, verifier = bodies
    assert plain["messages"] == TASK and plain["max_tokens"] == 200
    assert brief["messages"][-1]["content"].endswith("Be brief.") and brief["max_tokens"] == 32
    assert verifier["messages"] == TASK and verifier["max_tokens"] == 16
    # the tool ran on the coder's reply only, and the printed line is its answer
    assert "Program output" not in results["plain"].text
    assert "The answer is 42." in results["coder"].text and extract_math_answer(results["coder"].text) == "42"


def test_program_of_thought_answer_reads_as_the_answer_to_every_grader():
    reply = "The answer is 41, I think.\n```python\nx = 6 * 7\nprint('working...')\nprint(x)\n```\n<idea>x</idea>"
    out = python_tool(reply, run=lambda p: run_python(p, limits=SandboxLimits(wall_s=10, cpu_s=5)))
    assert out.startswith(reply.rstrip()) and "Program output:\nworking...\n42" in out
    assert extract_math_answer(out) == "42"
    letter = python_tool("Answer: A\n```python\nprint('C')\n```", run=lambda p: run_python(p))
    assert extract_choice(letter) == "C"
    assert python_tool(out) == out                          # already run: not run again
    assert python_tool("no program here") == "no program here"
    assert program_of("```python\nprint(1)") == "print(1)"  # a fence cut off by the cap still counts


def _agents_recording(tmp_path):
    """Three agents of one stub model (a plain one, one with instructions, one with the tool) recorded at K = 3."""
    from recording_support import reply_for

    from trinity.pipeline import record_stage

    def reply(body):
        # the stub's rules, keyed on the agent's shaped messages; the coder agent's answers are programs
        if "Answer with a program." in body["messages"][-1]["content"]:
            return completion("```python\nprint(3 + 4)\n```\n<idea>add</idea>", completion_tokens=12)
        return reply_for(body)

    write_prepared(tmp_path / "prepared", {"train": 2, "validation": 1, "test": 1})
    with StubServer(reply) as server:
        cfg = recording_cfg(tmp_path, server.base_url, roles=("worker", "verifier"), max_turns=3,
                            items={"train": 1, "validation": 1, "test": 1})
        cfg = with_values(cfg, {"pool": stub_pool_mapping(server.base_url, models={
            "plain": {}, "brief": {"setup": {"instructions": {"worker": "Be brief."}}},
            "coder": {"setup": {"instructions": {"worker": "Answer with a program."}, "tool": "python"}}},
            model_id="m-big-id")})
        record_stage.run(cfg, progress=lambda _l: None, grader=grade,
                         client_factory=lambda journal, known: PoolClient.from_config(cfg.pool, cache_path=journal,
                                                                                replay=known))
    return cfg, record_stage.recording_dir(cfg), server


def test_a_recording_of_agents_is_complete_for_exact_fitness_and_shares_their_verifier_calls(tmp_path):
    import numpy as np

    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.pipeline.record_stage import chosen_items
    from trinity.pool.providers import resolve_endpoint
    from trinity.record import store
    from trinity.record.exact import compile_items, expectations, recorded_lookup
    from trinity.record.replay import RecordedReplies

    cfg, root, server = _agents_recording(tmp_path)
    rec = store.open_recording(root)
    agents = ("plain", "brief", "coder")
    coder = rec.nodes.filter((rec.nodes["model"] == "coder") & (rec.nodes["role"] == "worker"))
    assert coder.height and all("The answer is 7." in r for r in coder["reply"])   # recorded after the tool
    assert coder["grade"].min() == 1.0
    # no agent has Verifier instructions: one verifier request per distinct answer, whichever agent verifies
    verifier_bodies = [r.json for r in server.requests if r.path.endswith("/chat/completions")
                       and r.json["messages"][0]["content"].startswith("You are the Verifier")]
    reviewed = {b["messages"][-1]["content"] for b in verifier_bodies}
    assert len(verifier_bodies) == len(reviewed)
    verifier_nodes = rec.nodes.filter(rec.nodes["role"] == "verifier")
    assert verifier_nodes.height >= 3 * len(reviewed)

    protocol = ProtocolConfig.from_config(cfg.protocol)
    endpoints = {m: resolve_endpoint(m, cfg.pool.models[m], cfg.pool) for m in agents}
    grades = {(r["item"], r["reply"]): r["grade"] for r in rec.nodes.iter_rows(named=True) if r["grade"] is not None}
    items = chosen_items(cfg)
    compiled = compile_items(items, protocol, agents, ("worker", "verifier"),
                             recorded_lookup(RecordedReplies(rec), endpoints, protocol, grades))
    T = len(compiled.transcripts)
    always_coder = np.zeros((1, T, 3))
    always_coder[..., 2] = 1.0
    worker_only = np.zeros((1, T, 3))
    worker_only[..., 0] = 1.0
    exact = expectations(compiled, compiled.items, always_coder, worker_only, max_turns=3)
    assert exact["reward"][0] == pytest.approx(1.0) and exact["turns"][0] == pytest.approx(3.0)
