"""What the evaluation tests share (no tests here): a config on three local models, a scripted pool in which
the last one answers right, fixed features and routing heads (tests/unit/test_eval_methods.py), and a stand-in
coordinator with a priced pool for the evaluate stage (its unit and integration tests)."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import numpy as np
import pytest
from scripted_pool import ScriptedPool

from trinity.assembly.loop_thread import LoopThread
from trinity.assembly.runtime import StageRuntime
from trinity.config import load, to_yaml, typed
from trinity.contracts import ROLES
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.router import CoordinatorRouter
from trinity.coordinator.saved import check_metadata, load_params
from trinity.eval.moa import moa_prompts
from trinity.pipeline import evaluate_stage
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


def stand_in_runtime(cfg, pool) -> StageRuntime:
    """A stage runtime's own chunk running on `pool`, with a stand-in coordinator (no backbone)."""
    return StageRuntime(typed(cfg), loop=LoopThread(), pool=pool, grader=grade,
                        coordinator=StandInCoordinator(int(typed(cfg).coordinator.token_position)))


class StandIns:
    """What the evaluate stage is handed instead of building it: a stand-in runtime per config on one pool, and
    stand-in coordinators for the ablations that route with their own (`variants`: their configs)."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.runtimes: dict[str, StageRuntime] = {}
        self.variants: list = []

    def runtime(self, cfg) -> StageRuntime:
        key = to_yaml(cfg)
        if key not in self.runtimes:
            self.runtimes[key] = stand_in_runtime(cfg, self.pool)
        return self.runtimes[key]

    def variant_coordinator(self, variant) -> StandInCoordinator:
        self.variants.append(variant)
        return StandInCoordinator(int(variant.coordinator.token_position))

    def run(self, cfg, **kwargs) -> dict:
        """evaluate_stage.run with the stand-ins injected."""
        return evaluate_stage.run(cfg, runtime=self.runtime(cfg), variant_coordinator=self.variant_coordinator,
                                  **kwargs)

    def close(self) -> None:
        for runtime in self.runtimes.values():
            runtime.loop.stop()


def items(suite: str, n: int) -> list[TaskItem]:
    return [TaskItem(suite=suite, item_id=str(i), prompt=f"{suite} {i}: repeat the word w{i}.", reference=f"w{i}")
            for i in range(n)]


@pytest.fixture
def stage(tmp_path, monkeypatch):
    folders = ("cache", "eval", "reports", "metrics", "runs", "ablations", "states")
    cfg = load(None, ["experiment=local_live"] + [f"paths.{k}={tmp_path}/{k}" for k in folders]
                  + ["eval.bootstrap_samples=200", "eval.methods=[trinity,trinity:argmax,single_worker,role_select,"
                     "random,loop,moa,ablations]"])
    pool = PricedPool(script(), delay_s=0.001)
    stand_ins = StandIns(pool)
    monkeypatch.setattr(evaluate_stage, "eval_sets", lambda c: {
        "validation": {"gsm8k": items("gsm8k", 2)},
        "test": {"gsm8k": items("gsm8k", 3), "gpqa_diamond": items("gpqa_diamond", 3)}})
    yield cfg, pool, stand_ins
    stand_ins.close()

