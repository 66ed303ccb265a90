"""Every registered router through one episode of the scripted pool: each returns valid decisions.

The test is parametrised over the registry, so a router added to ROUTER_CLS without a builder here
fails instead of going untested.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from scripted_pool import ScriptedPool

from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import ROLES, Router
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.router import CoordinatorRouter
from trinity.episodes.protocol import run_episode
from trinity.episodes.trace import EpisodeId
from trinity.routers.baselines import RandomRouter, RoleOnlyRouter, SingleWorkerRouter, WorkerVerifierLoopRouter
from trinity.routers.masked import MaskedRouter
from trinity.routers.registry import ROUTER_CLS
from trinity.serve.settings import RolePolicy
from trinity.tasks.types import TaskItem

AGENTS = ["a", "b", "c"]
D = 4
CFG = ProtocolConfig(max_turns=6, collaboration_instructions="Cooperate.", worker_system="W",
                     thinker_system="T", verifier_system="V")
ITEM = TaskItem(suite="toy", item_id="q0", prompt="What is 2+2?", reference="4")
# REJECT keeps the episode going, so a router is asked on every turn unless it calls the Verifier first
SCRIPT = {"worker": "maybe 4 <idea>add them</idea>", "verifier": "REJECT",
          "thinker": "<suggestion>check</suggestion><suggested_role>worker</suggested_role>"}


class ConstantFeatures:
    """A feature service double: the same feature for every transcript, so the head alone decides."""

    async def features(self, transcript, deltas=None):
        await asyncio.sleep(0)
        return np.ones(D)


def coordinator() -> CoordinatorRouter:
    weights = np.random.default_rng(0).normal(0.0, 1.0, (len(AGENTS) + len(ROLES), D))
    return CoordinatorRouter(RoutingHead(weights, len(AGENTS)), ConstantFeatures())


BUILDERS = {
    "coordinator": coordinator,
    "masked": lambda: MaskedRouter(coordinator(), mode="sample", policy=RolePolicy.everyone(AGENTS).narrowed(
        {}, {"verifier": ["a"]}, where="serve.roles")),
    "single": lambda: SingleWorkerRouter(1),
    "random": lambda: RandomRouter(len(AGENTS)),
    "loop": lambda: WorkerVerifierLoopRouter(2),
    "roles": lambda: RoleOnlyRouter(coordinator(), 0),
}


class Recording:
    """Passes the router's choices through untouched and keeps them (the protocol would coerce them)."""

    def __init__(self, router: Router):
        self.router = router
        self.choices: list[tuple] = []

    async def choose(self, transcript, turn, rng):
        choice = await self.router.choose(transcript, turn, rng)
        self.choices.append(choice)
        return choice


async def grade(item: TaskItem, answer: str) -> float:
    return 1.0 if item.reference in answer else 0.0


@pytest.mark.parametrize("name", sorted(set(ROUTER_CLS) | set(BUILDERS)))
def test_every_registered_router_returns_valid_decisions_in_an_episode(name):
    assert name in ROUTER_CLS, f"builder for {name!r}, which is not registered"
    assert name in BUILDERS, f"registered router {name!r} has no builder in this test"
    router = BUILDERS[name]()
    assert type(router) is ROUTER_CLS[name] and isinstance(router, Router)
    recording = Recording(router)
    pool = ScriptedPool(CFG, SCRIPT)
    trace = asyncio.run(run_episode(ITEM, recording, pool, AGENTS, CFG, EpisodeId(-1, -1, ITEM.uid, 0), 7, grade))

    assert recording.choices and len(recording.choices) == len(trace.turns)
    for choice in recording.choices:
        assert isinstance(choice, tuple) and len(choice) == 2, choice
        agent, role = choice
        assert isinstance(agent, (int, np.integer)) and not isinstance(agent, (bool, np.bool_)), choice
        assert 0 <= agent < len(AGENTS), choice
        assert role in ROLES, choice
    assert trace.error is None
