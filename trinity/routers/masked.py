"""The serving router: the trained head's probabilities, masked by the per-role model policy.

The head draws agent and role independently; here the role is taken first (as the head would), then
the agent from the head's agent distribution restricted to the models allowed for the role the turn
will really have. That role is the router's own unless the previous turn was a Thinker with a valid
suggestion, which overrides it (docs/METHOD.md); `forced_role()` says so (serving passes the request's
Episode.forced_role), so a denied model never gets the forced role.
Sampling draws two uniforms from the episode rng, agent first, like RoutingHead.choose.
With `answer_first` and no visible answer yet, roles are barred before drawing: the Verifier always
(it would end the episode answerless), and on the last turn the Thinker too (nothing would follow it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from trinity.contracts import ROLES, Choice, Router
from trinity.contracts import ROUTING_MODES as MODES
from trinity.coordinator.head import argmax_tie, draw

if TYPE_CHECKING:
    from trinity.coordinator.router import CoordinatorRouter


class AllowedAgents(Protocol):
    """Which agent indices may take each role. Serving's RolePolicy is one; it is described here rather
    than imported so that the router registry (and the pipeline stages that read it) need no serving code."""

    @property
    def allowed(self) -> Mapping[str, Collection[int]]: ...


def choose_masked(p_agent: np.ndarray, p_role: np.ndarray, policy: AllowedAgents, forced_role: str | None,
                  rng: np.random.Generator | None, mode: str, *, barred_roles: Collection[str] = ()) -> Choice:
    """(agent index, router role) with the agent allowed for `forced_role or router role`.
    `barred_roles` get probability 0 and the others are renormalised; the Worker cannot be barred."""
    if mode not in MODES:
        raise ValueError(f"routing mode must be one of {MODES}, got {mode!r}")
    if "worker" in barred_roles:
        raise ValueError("the Worker role cannot be barred")
    if barred_roles:
        p_role = np.asarray(p_role, dtype=np.float64).copy()
        p_role[[ROLES.index(r) for r in barred_roles]] = 0.0
        if p_role.sum() <= 0.0:
            p_role[ROLES.index("worker")] = 1.0
    if mode == "sample":
        if rng is None:
            raise ValueError("sampling needs the episode's seeded rng")
        u_agent, u_role = rng.random(), rng.random()
        role = ROLES[draw(p_role, u_role)]
    else:
        # exact ties go to a seeded uniform draw, except among the roles left after barring (answer-first):
        # there the Worker wins a tie, since getting an answer is the point of barring the others
        role = ROLES[int(np.argmax(p_role))] if barred_roles else ROLES[argmax_tie(p_role, rng)]
    allowed = np.zeros(len(p_agent), dtype=bool)
    allowed[sorted(policy.allowed[forced_role or role])] = True
    p = np.where(allowed, np.asarray(p_agent, dtype=np.float64), 0.0)
    if p.sum() <= 0.0:  # every allowed model's probability underflowed: fall back to uniform over them
        p = allowed.astype(np.float64)
    if mode == "sample":
        return draw(p, u_agent), role
    return argmax_tie(p, rng), role


class MaskedRouter(Router):
    """The router for one request (policy and forced role are per request).
    `base` is the trained CoordinatorRouter: its head, feature service and SVF offsets are used as they are."""

    def __init__(self, base: CoordinatorRouter, *, mode: str, policy: AllowedAgents,
                 forced_role: Callable[[], str | None] = lambda: None,
                 answer_first: bool = False, answered: Callable[[], bool] = lambda: True,
                 last_turn: int | None = None):
        if mode not in MODES:
            raise ValueError(f"routing mode must be one of {MODES}, got {mode!r}")
        self.base = base
        self.mode = mode
        self.policy = policy
        self.forced_role = forced_role
        self.answer_first = answer_first
        self.answered = answered
        self.last_turn = last_turn

    def barred(self, turn: int) -> tuple[str, ...]:
        """The roles answer-first bars at `turn`: none once a Worker has answered."""
        if self.answer_first and not self.answered():
            return ("verifier", "thinker") if turn == self.last_turn else ("verifier",)
        return ()

    async def probabilities(self, transcript: str, turn: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The trained head's own (agent, role) probabilities for `transcript` at `turn` (a head with a per-turn
        prior differs by turn), before any mask."""
        feature = await self.base.service.features(transcript, self.base.svf_deltas)
        return self.base.head.probabilities(feature, turn)

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        p_agent, p_role = await self.probabilities(transcript, turn)
        return choose_masked(p_agent, p_role, self.policy, self.forced_role(), rng, self.mode,
                             barred_roles=self.barred(turn))
