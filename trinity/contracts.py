"""The shared words of every floor above: the head's roles, the routing modes and the contract between
the turn protocol and whatever picks (agent, role) each turn. Defined once here, at the bottom, so the
config schema, the coordinator, the routers, the episodes, evolution and serving read the same names
without importing one another.

The evolved coordinator, the baselines (single model, random, fixed loops) and test doubles all
implement `Router`; the episode runner knows nothing else about them. Router is a Protocol, so test
doubles need not inherit from it; the routers of this package do, so a missing `choose` fails at
construction rather than mid-episode."""

from __future__ import annotations

from abc import abstractmethod
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np

# Order of the head's role logits (docs/METHOD.md): worker, thinker, verifier.
ROLES: tuple[str, str, str] = ("worker", "thinker", "verifier")


class RoutingMode(StrEnum):
    """How the head turns its logits into a choice: draw from the softmax, or take the largest."""

    sample = "sample"
    argmax = "argmax"


# Every mode in its declared order (validation of the evolved mean runs both, in this order).
ROUTING_MODES: tuple[str, ...] = tuple(m.value for m in RoutingMode)


# (agent index into the pool's model order, role name in ROLES): one turn's routing decision.
# The coordinator's recorded trinity.coordinator.head.Decision adds what policy-gradient training needs.
Choice = tuple[int, str]


@runtime_checkable
class Router(Protocol):
    @abstractmethod
    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        """Return (agent index into the pool's model order, role name in ROLES) for this turn.

        `transcript` is the shared user message so far (task prompt + collaboration instructions +
        numbered reference thoughts); `turn` counts from 0; `rng` is the episode's seeded generator.
        """
        ...
