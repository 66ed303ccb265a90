"""What the evaluation tests share (no tests here): a config on three local models, a scripted pool in which
the last one answers right, fixed features and routing heads (tests/unit/test_eval_methods.py), and a stand-in
coordinator with a priced pool for the evaluate stage (its unit and integration tests)."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import numpy as np
import pytest
from omegaconf import OmegaConf
from scripted_pool import ScriptedPool

from trinity.config import compose, load
from trinity.contracts import ROLES
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.router import CoordinatorRouter
from trinity.coordinator.saved import check_metadata, load_params
from trinity.eval.moa import moa_prompts
from trinity.pipeline import evaluate_stage
from trinity.pipeline.rollouts import LoopThread, RolloutContext
from trinity.tasks.types import TaskItem

CFG = load(None, ["experiment=local_live",
                  "eval.methods=[trinity,trinity:argmax,single_worker,role_select,random,loop,moa,ablations]"])
PROTOCOL = CFG.protocol
AGENTS = list(CFG.pool.models)                 # three local models; the last one answers correctly
GOOD = len(AGENTS) - 1
D = 4
ITEMS = [TaskItem(suite="toy", item_id=str(i), prompt=f"Question {i}: repeat the word w{i}.", reference=f"w{i}")
         for i in range(4)]


async def grade(item: TaskItem, answer: str) -> float:
    return 1.0 if re.search(rf"\b{item.reference}\b", answer or "") else 0.0


def _word(messages) -> str | None:
    m = re.search(r"repeat the word (\w+)", messages[-1]["content"])
    return m.group(1) if m else None


def good_worker(messages, _index):
    return f"The word is {_word(messages)}. <idea>copied it</idea>"


def aggregate(messages, _index):
    """The aggregator keeps the word some proposal gave, if any."""
    found = re.search(r"The word is (w\d+)", messages[-1]["content"])
    return f"Merged: {found.group(1)}" if found else "Merged: nothing"


class Pool(ScriptedPool):
    """ScriptedPool that also recognises the Mixture-of-Agents aggregator's system prompt."""

    def __init__(self, script, **kw):
        super().__init__(CFG.protocol, script, **kw)
        self._role_of_system[moa_prompts(CFG.eval.moa).aggregator_system] = "aggregator"


def script(extra=None, **by_role):
    base = {(AGENTS[GOOD], "worker"): good_worker, "worker": "I do not know. <idea>none</idea>",
            "verifier": "ACCEPT", "aggregator": aggregate,
            "thinker": "<suggestion>check</suggestion><suggested_role>verifier</suggested_role>"}
    return {**base, **by_role, **(extra or {})}


class FixedFeatures:
    """A feature service that returns the same feature for every transcript (the head decides)."""

    def __init__(self):
        self.calls = 0

    async def features(self, transcript, deltas=None):
        self.calls += 1
        await asyncio.sleep(0)
        return np.ones(D)


def head_weights(agent: int, role: int, strength: float = 5.0) -> np.ndarray:
    w = np.zeros((len(AGENTS) + 3, D))
    w[agent] = strength
    w[len(AGENTS) + role] = strength
    return w


L = len(AGENTS)


class StandInCoordinator:
    """What the stage uses of a Coordinator: metadata() and read_params() for the saved-file check,
    router_for()."""

    def __init__(self, token_position: int = -2):
        self.token_position = token_position
        self.service = FixedFeatures()

    def metadata(self) -> dict:
        return {"backbone_id": "stand-in", "backbone_revision": None, "hidden_size": D, "pool_models": AGENTS,
                "roles": list(ROLES), "token_position": self.token_position, "svf_matrices": [],
                "num_params": (L + 3) * D}

    def read_params(self, path):
        params, meta = load_params(path)
        check_metadata(meta, self.metadata(), path)
        return params

    def router_for(self, params, mode=None):
        head = RoutingHead(np.asarray(params).reshape(L + 3, D), L)
        return CoordinatorRouter(head, self.service, None, mode or "sample")


class PricedPool(Pool):
    """List prices, and the first pool model's replies always hit max_tokens (finish_reason "length")."""

    def list_price(self, model, prompt_tokens, completion_tokens):
        return (prompt_tokens + completion_tokens) * 2e-6

    def _result(self, model, messages, reply, delay):
        result = super()._result(model, messages, reply, delay)
        if not result.ok:
            return result
        return dataclasses.replace(result, finish_reason="length" if model == AGENTS[0] else "stop")


def stand_in_context(cfg, pool) -> RolloutContext:
    ctx = object.__new__(RolloutContext)   # RolloutContext's own chunk running, without a backbone
    ctx.cfg, ctx.agents, ctx.loop, ctx.pool, ctx.grader = cfg, list(cfg.pool.models), LoopThread(), pool, grade
    ctx.coordinator = StandInCoordinator(int(cfg.coordinator.token_position))
    return ctx


def items(suite: str, n: int) -> list[TaskItem]:
    return [TaskItem(suite=suite, item_id=str(i), prompt=f"{suite} {i}: repeat the word w{i}.", reference=f"w{i}")
            for i in range(n)]


@pytest.fixture
def stage(tmp_path, monkeypatch):
    folders = ("cache", "eval", "reports", "metrics", "runs", "ablations", "states")
    cfg = compose(["experiment=local_live"] + [f"paths.{k}={tmp_path}/{k}" for k in folders]
                  + ["eval.bootstrap_samples=200", "eval.methods=[trinity,trinity:argmax,single_worker,role_select,"
                     "random,loop,moa,ablations]"])
    pool = PricedPool(script(), delay_s=0.001)
    contexts: dict[str, RolloutContext] = {}

    def get(c, **kw):
        key = OmegaConf.to_yaml(c)
        if key not in contexts:
            contexts[key] = stand_in_context(c, pool)
        return contexts[key]

    monkeypatch.setattr(evaluate_stage.RolloutContext, "get", staticmethod(get))
    monkeypatch.setattr(evaluate_stage, "eval_sets", lambda c: {
        "validation": {"gsm8k": items("gsm8k", 2)},
        "test": {"gsm8k": items("gsm8k", 3), "gpqa_diamond": items("gpqa_diamond", 3)}})
    yield cfg, pool, contexts
    for ctx in contexts.values():
        ctx.loop.stop()

