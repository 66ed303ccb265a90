"""One turn protocol, driven from outside: the rollout runner, the recorder and serving all play the same
Episode, so one episode played live, recorded, and replayed through the runner and through serving gives the
same trace and sends the same requests. The path: a Thinker advises a Worker, the Worker answers, a Verifier
rejects twice, and the episode ends at the turn limit with the answer held (a scripted pool, a steered head)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from scripted_pool import ScriptedPool
from serve_support import AGENTS, serve_cfg, steered

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES
from trinity.episodes.protocol import Episode
from trinity.episodes.runner import EpisodeSpec, run_episodes
from trinity.episodes.trace import EpisodeId, Trace
from trinity.pool.types import CallResult
from trinity.record.tree import Reply, TreeSettings, expand_item
from trinity.routers.masked import MaskedRouter
from trinity.serve.request_episode import EpisodeRunner, trace_dict
from trinity.serve.schema import parse_chat_request
from trinity.serve.settings import RolePolicy, ServeSettings
from trinity.tasks.types import TaskItem

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is 6*7?"
REQUEST_ID = "req-one"
SCRIPT = {"thinker": "<suggestion>multiply</suggestion><suggested_role>worker</suggested_role>",
          "worker": "The answer is 42. <idea>six sevens</idea>",
          ("beta", "verifier"): "REJECT: show the work", "verifier": "ACCEPT"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = serve_cfg("http://127.0.0.1:9/v1", tmp_path_factory.mktemp("cache"))   # protocol.max_turns=4
    head = steered([("alpha", "thinker"), ("beta", "verifier")])   # after k answers: plan[k]
    serving = EpisodeRunner(ScriptedPool(cfg.protocol, SCRIPT), list(AGENTS), cfg.protocol, head, root_seed=0)
    request = parse_chat_request({"model": "trinity", "messages": [{"role": "user", "content": PROMPT}]},
                                 ServeSettings.from_config(cfg))
    # what serving plays: the request's protocol, an item of its own (the seed comes with the served trace)
    protocol = dataclasses.replace(serving.protocol, max_turns=request.max_turns, max_tokens=request.max_tokens)
    item = TaskItem(suite="serve", item_id=REQUEST_ID, prompt=PROMPT, reference="42", split="serve")
    return cfg, head, protocol, item, request


async def _grade(item: TaskItem, answer: str) -> float:
    return 1.0 if item.reference in answer else 0.0


def run(setup, pool, seed: int) -> Trace:
    """The rollout runner's trace of the episode on `pool`, with the head routing by argmax."""
    _, head, protocol, item, _ = setup
    router = MaskedRouter(head, mode="argmax", policy=RolePolicy.everyone(AGENTS))
    spec = EpisodeSpec(item, router, EpisodeId(-1, -1, item.uid), seed)
    return asyncio.run(run_episodes([spec], pool, list(AGENTS), protocol, _grade, max_concurrency=1))[0]


def serve(setup, pool) -> dict[str, Any]:
    cfg, head, _, _, request = setup
    runner = EpisodeRunner(pool, list(AGENTS), cfg.protocol, head, root_seed=0)
    result = asyncio.run(runner.run(request, REQUEST_ID))
    assert result.error is None
    return result.trace


def record(setup, pool):
    """The recorder's tree of every call the protocol can make on the item, on `pool`."""
    _, _, protocol, item, _ = setup

    async def call(model, role, messages, sample, context):
        result = await pool.chat(model, messages, sample_index=sample, role=role, context=context)
        return _key(model, messages), Reply(result.text, result.ok, result.finish_reason, result.prompt_tokens,
                                            result.completion_tokens, result.latency_s, result.cost_usd, result.error)

    settings = TreeSettings(agents=AGENTS, roles=ROLES, max_turns=protocol.max_turns)
    return asyncio.run(expand_item(item, protocol, settings, call, _grade))


def _key(model: str, messages: list[dict[str, str]]) -> str:
    return json.dumps([model, messages], sort_keys=True)


class RecordingPool:
    """Replays a recorded tree: every request is answered by the node that recorded it; a miss fails the test."""

    def __init__(self, tree):
        self.replies = {node.request_hash: node.reply for node in tree.nodes}
        self.requests: list[tuple[str, list[dict[str, str]]]] = []

    async def chat(self, model, messages, *, sample_index=0, max_tokens=None, temperature=None, role=None,
                   context=None) -> CallResult:
        self.requests.append((model, messages))
        reply = self.replies[_key(model, messages)]
        return CallResult(model=model, text=reply.text, ok=reply.ok, error=reply.error,
                          prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                          latency_s=reply.latency_s, cost_usd=reply.cost_usd, finish_reason=reply.finish_reason)


def test_one_episode_gives_one_trace_live_recorded_and_replayed_through_the_runner_and_serving(setup):
    cfg, _, protocol, _, request = setup
    tree = record(setup, ScriptedPool(cfg.protocol, SCRIPT))
    served_pool = RecordingPool(tree)
    served = serve(setup, served_pool)
    seed = served["seed"]

    live_pool = ScriptedPool(cfg.protocol, SCRIPT)
    live = run(setup, live_pool, seed)
    assert [(t.agent, t.role, t.role_from_thinker) for t in live.turns] == [
        ("alpha", "thinker", False), ("alpha", "worker", True), ("beta", "verifier", False),
        ("beta", "verifier", False)]
    assert [t.verdict for t in live.turns][2:] == ["REJECT", "REJECT"] and live.turns[0].suggested_role == "worker"
    assert live.end_reason == "turn_limit" and live.reward == 1.0 and live.calls == 4
    assert "multiply" in live_pool.calls[1].messages[-1]["content"]   # the advice reached the Worker

    path = tuple((t.agent, t.role, 0) for t in live.turns)
    recorded = {n.path: n for n in tree.nodes}
    assert [recorded[path[:k + 1]].reply.text for k in range(len(path))] == [t.call.text for t in live.turns]
    assert recorded[path].verdict == "REJECT" and recorded[path[:1]].suggested_role == "worker"

    replay_pool = RecordingPool(tree)
    replayed = run(setup, replay_pool, seed)
    assert replayed.to_dict() == live.to_dict()
    assert replay_pool.requests == [(c.model, c.messages) for c in live_pool.calls]

    expected = trace_dict(live, request_id=REQUEST_ID, routing=request.routing, policy=request.policy,
                          wall_s=served["latency_s"], answer_turn=1, answer_source="reply")
    assert served == expected
    assert served_pool.requests == replay_pool.requests
    assert served["pool_calls"] == 4 and protocol.max_turns == 4


def test_a_driver_steps_an_episode_and_its_advice_hook_may_redirect_a_thinker():
    """What serving does by hand: ask the episode what the router's choice becomes, send its request, tell it the
    reply. The advice hook turns a Thinker's suggested Verifier into a Worker (answer-first); the Turn keeps what
    the Thinker said, and the Worker gets the suggestion."""
    cfg = ProtocolConfig(max_turns=3, worker_system="W", thinker_system="T", verifier_system="V", max_tokens=64)
    item = TaskItem(suite="toy", item_id="q1", prompt="What is 2+2?", reference="4")
    heard: list[tuple[int, str]] = []

    def advice_role(turn, role: str) -> str:
        heard.append((turn.index, role))
        return "worker"

    episode = Episode(cfg, item, ["big", "small"], EpisodeId(-1, -1, item.uid), 0, advice_role=advice_role)
    thinker = episode.turn(0, "thinker")
    assert thinker.called and episode.request(thinker).messages[0]["content"] == "T"
    episode.tell(thinker, CallResult("big", "<suggestion>add</suggestion><suggested_role>verifier</suggested_role>",
                                     True))
    assert heard == [(0, "verifier")] and thinker.suggested_role == "verifier" and episode.forced_role == "worker"

    worker = episode.turn(1, "verifier")          # the advice sets the role, never the agent
    request = episode.request(worker)
    assert (worker.agent, worker.role, worker.role_from_thinker) == ("small", "worker", True)
    assert request.messages[0]["content"] == "W" and "add" in request.messages[-1]["content"]
    episode.tell(worker, CallResult("small", "4 <idea>two and two</idea>", True))
    assert episode.answer == "4 <idea>two and two</idea>" and "two and two" in episode.transcript

    verifier = episode.turn(0, "verifier")
    episode.tell(verifier, CallResult("big", "ACCEPT", True))
    assert episode.done and episode.end == "accept" and verifier.verdict == "ACCEPT"
    trace = asyncio.run(episode.finish(_grade))
    assert (trace.end_reason, trace.reward, trace.calls, trace.final_answer) == ("accept", 1.0, 3, episode.answer)


# The protocol's readers and rules (trinity.episodes): who else names them restates the protocol.
READERS = {"parse_thinker", "parse_verdict", "worker_thought"}        # read_reply is the one reader of a reply
RULES = READERS | {"read_reply", "TurnState", "after_reply", "after_failed_call", "system_prompt", "ThinkerAdvice",
                   "run_episode"}


def _names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return names | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.mark.parametrize("part, forbidden", [("serve", RULES), ("record", READERS), ("plan", READERS),
                                             ("pipeline", READERS), ("eval", READERS), ("evolve", READERS)])
def test_the_drivers_name_none_of_the_rules_they_drive(part, forbidden):
    """Serving asks the Episode what a turn is and tells it what came back: it reads no role out of a prompt
    (system_prompt), parses no reply and applies no rule itself. The others read a reply only through
    read_reply."""
    found = {str(p.relative_to(ROOT)): sorted(_names(p) & forbidden) for p in (ROOT / "trinity" / part).rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}
