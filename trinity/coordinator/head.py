"""The routing head: one bias-free linear map W in R^{(L+3) x d} on the coordinator's feature.

Rows 0..L-1 are the agent logits in pool order; rows L..L+2 the role logits in trinity.routing.ROLES
order. Agent and role are drawn independently from their two softmaxes (training and default
serving), or taken by argmax for deterministic serving.
"""

from __future__ import annotations

import numpy as np

from trinity.routing import ROLES

MODES = ("sample", "argmax")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


class RoutingHead:
    def __init__(self, weights: np.ndarray, n_agents: int):
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim != 2 or weights.shape[0] != n_agents + len(ROLES):
            raise ValueError(f"head weights must have shape ({n_agents + len(ROLES)}, d), got {weights.shape}")
        self.weights = weights
        self.n_agents = n_agents

    @staticmethod
    def num_params(n_agents: int, hidden_size: int) -> int:
        return (n_agents + len(ROLES)) * hidden_size

    @property
    def hidden_size(self) -> int:
        return int(self.weights.shape[1])

    def logits(self, feature: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = self.weights @ np.asarray(feature, dtype=np.float64)
        return z[: self.n_agents], z[self.n_agents :]

    def probabilities(self, feature: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        agent_logits, role_logits = self.logits(feature)
        return softmax(agent_logits), softmax(role_logits)

    def choose(self, feature: np.ndarray, rng: np.random.Generator | None, mode: str = "sample") -> tuple[int, str]:
        """(agent index, role). Sampling draws exactly two uniforms from `rng`: agent first, then role."""
        p_agent, p_role = self.probabilities(feature)
        if mode == "argmax":
            return int(np.argmax(p_agent)), ROLES[int(np.argmax(p_role))]
        if mode != "sample":
            raise ValueError(f"routing mode must be one of {MODES}, got {mode!r}")
        if rng is None:
            raise ValueError("sampling needs an explicit numpy Generator (the episode's seeded rng)")
        return _draw(p_agent, rng.random()), ROLES[_draw(p_role, rng.random())]


def _draw(p: np.ndarray, u: float) -> int:
    """Inverse-CDF draw: reproducible from the uniform alone, immune to rounding at the top end."""
    return int(min(np.searchsorted(np.cumsum(p), u * p.sum(), side="right"), len(p) - 1))
