"""CoordinatorRouter: one candidate's head (and SVF offsets) on top of the shared feature service."""

from __future__ import annotations

import numpy as np

from trinity.coordinator.head import MODES, RoutingHead
from trinity.coordinator.service import FeatureService


class CoordinatorRouter:
    """Implements trinity.routing.Router: feature of the transcript -> head -> (agent index, role)."""

    def __init__(self, head: RoutingHead, service: FeatureService, svf_deltas: np.ndarray | None = None, mode: str = "sample"):
        if mode not in MODES:
            raise ValueError(f"routing mode must be one of {MODES}, got {mode!r}")
        self.head = head
        self.service = service
        self.svf_deltas = svf_deltas
        self.mode = mode

    async def choose(self, transcript: str, turn: int, rng: np.random.Generator) -> tuple[int, str]:
        feature = await self.service.features(transcript, self.svf_deltas)
        return self.head.choose(feature, rng, self.mode)
