"""CoordinatorRouter: one candidate's head (and SVF offsets) on top of the shared feature service."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trinity.contracts import ROLES, ROUTING_MODES, Choice, Router
from trinity.coordinator.head import Decision, RoutingHead

if TYPE_CHECKING:  # the service imports torch; the router registry must stay cheap to import
    from trinity.coordinator.features.request_queue import FeatureService


PROBABILITY_MEMO = 4096   # transcripts whose head probabilities a router keeps


class CoordinatorRouter(Router):
    """Feature of the transcript -> head -> (agent index, role).

    With `record=True` the router keeps every decision (feature, agent, role) in `decisions`, in call
    order; build one recording router per episode so the list is that episode's turns (policy-gradient
    training reads them). A decision's feature is what the head's W multiplied (standardised under
    `coordinator.features.normalize=standardize`), so the gradient computed from it is the true one."""

    def __init__(self, head: RoutingHead, service: FeatureService, svf_deltas: np.ndarray | None = None,
                 mode: str = "sample", *, record: bool = False):
        if mode not in ROUTING_MODES:
            raise ValueError(f"routing mode must be one of {ROUTING_MODES}, got {mode!r}")
        self.head = head
        self.service = service
        self.svf_deltas = svf_deltas
        self.mode = mode
        self.decisions: list[Decision] | None = [] if record else None
        self._probs: dict[object, tuple[np.ndarray, np.ndarray]] = {}

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> Choice:
        feature = await self.service.features(transcript, self.svf_deltas)
        if self.decisions is None:
            # the head's probabilities of a transcript, once per router (repeats of an item share them); a
            # head with a per-turn prior gives one transcript other probabilities at another turn
            key = transcript if self.head.turn_bias is None else (transcript, min(turn, len(self.head.turn_bias) - 1))
            probs = self._probs.get(key)
            if probs is None:
                probs = self.head.probabilities(feature, turn)
                if len(self._probs) < PROBABILITY_MEMO:
                    self._probs[key] = probs
            return self.head.choose_from(*probs, rng, self.mode)
        agent, role = self.head.choose(feature, rng, self.mode, turn)
        if self.decisions is not None:
            mask = tuple(bool(m) for m in self.head.role_mask)
            head_input = np.asarray(self.head.inputs(feature), dtype=np.float32).copy()
            self.decisions.append(Decision(head_input, agent, ROLES.index(role), mask))
        return agent, role
