"""Baseline routers: the ways of using the pool that the evolved coordinator must beat."""

from __future__ import annotations

import numpy as np

from trinity.contracts import ROLES, Choice, Router


class SingleWorkerRouter(Router):
    """One pool model as the only Worker (run with max_turns=1: one answer, no review)."""

    def __init__(self, agent_index: int) -> None:
        self.agent_index = agent_index

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        return self.agent_index, "worker"


class RandomRouter(Router):
    """Uniformly random agent and role at every turn: x0's routing (a zero head), over the same `roles`
    the coordinator may pick (coordinator.roles; default all three)."""

    def __init__(self, n_agents: int, roles: tuple[str, ...] = ROLES) -> None:
        self.n_agents = n_agents
        self.roles = tuple(roles)

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        return int(rng.integers(self.n_agents)), self.roles[int(rng.integers(len(self.roles)))]


class WorkerVerifierLoopRouter(Router):
    """A fixed loop with one model: Worker, Verifier, Worker, Verifier, ..."""

    def __init__(self, agent_index: int) -> None:
        self.agent_index = agent_index

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        return self.agent_index, ("worker" if turn % 2 == 0 else "verifier")


class RoleOnlyRouter(Router):
    """One fixed pool model; the wrapped coordinator router picks only the role.

    The coordinator draws agent and role independently from its two softmaxes, so keeping its role and
    discarding its agent samples exactly the role head's distribution (with the same rng draws as the
    full coordinator, so role-only and full runs share their random numbers)."""

    def __init__(self, coordinator: Router, agent_index: int) -> None:
        self.coordinator = coordinator
        self.agent_index = agent_index

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        _, role = await self.coordinator.choose(transcript, turn, rng)
        return self.agent_index, role
