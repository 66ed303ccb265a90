"""The routing head: one bias-free linear map W in R^{(L+3) x d} on the coordinator's feature.

Rows 0..L-1 are the agent logits in pool order; rows L..L+2 the role logits in trinity.contracts.ROLES
order. Agent and role are drawn independently from their two softmaxes (training and default
serving), or taken by argmax for deterministic serving.

Role restriction (the paper's "no Thinker" / "no roles" ablations): `allowed_roles` lists the roles the
head may pick. The layout keeps all three role rows; a disallowed role gets probability 0 and the
allowed ones are renormalised (a softmax over the allowed logits), in sampling and argmax alike.
Sampling still draws exactly two uniforms per turn, so episode random streams line up across variants.

Feature normalisation (`coordinator.features.normalize=standardize`): the head may hold a FeatureNorm;
then W multiplies (f - mu) / sd instead of f, in every method that turns a feature into probabilities
(logits, probabilities, choose, log_prob, log_prob_grad). Callers always pass the raw backbone
feature; `inputs(f)` is what W actually multiplies. No bias: W = 0 is uniform routing.

Per-turn prior (a departure from the paper, docs/METHOD.md): the head may hold `turn_bias`, a (k, L + 3)
table of logits added at turn t to W's logits (row min(t, k - 1): a turn past the table reads its last row).
The head itself reads only the transcript's state, and a transcript does not say which turn it is (after a
rejected Verifier it is unchanged), so without this table no head can follow a per-turn policy such as
"answer, verify, redo". Evolution never moves it: it comes from the choice that keeps a coordinator never below a
constant policy (trinity.pipeline.constant_policy), which saves it with the coordinator as part of its parameter vector
(trinity.coordinator.layout), so evaluation and serving route with it exactly as it was chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trinity.contracts import ROLES, ROUTING_MODES
from trinity.coordinator.feature_norm import FeatureNorm


def softmax(logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax; entries where `mask` is False get probability exactly 0 (the rest renormalised)."""
    z: np.ndarray = np.asarray(logits, dtype=np.float64)
    if mask is not None:
        z = np.where(mask, z, -np.inf)
    z = np.exp(z - z.max())
    probabilities: np.ndarray = z / z.sum()
    return probabilities


def check_roles(roles: Sequence[str] | None) -> tuple[str, ...]:
    """The allowed roles in ROLES order; None means all. Worker must stay: only a Worker answers."""
    if roles is None:
        return ROLES
    roles = [str(r) for r in roles]
    unknown = [r for r in roles if r not in ROLES]
    if unknown or len(set(roles)) != len(roles) or "worker" not in roles:
        raise ValueError(f"allowed roles must be distinct names from {ROLES} including 'worker', got {roles}")
    return tuple(r for r in ROLES if r in roles)


def section_roles(roles: Sequence[str] | None) -> tuple[str, ...]:
    """`coordinator.roles` as configured (None: all of ROLES) in ROLES order; a bad list is a ConfigError
    naming the key."""
    from trinity.errors import ConfigError

    try:
        return check_roles(None if roles is None else list(roles))
    except ValueError as e:
        raise ConfigError(f"config key 'coordinator.roles': {e}") from None


@dataclass(frozen=True)
class Decision:
    """One routing decision as the head made it: the feature it read and the (agent, role) it drew.

    `feature` is what W multiplied (`RoutingHead.inputs`): the backbone feature, standardised when the
    head holds a FeatureNorm. So a plain `RoutingHead(W)` without normalisation reproduces the decision's
    probabilities and score-function gradient exactly, which is how the `reinforce` strategy reads it.
    `role` indexes ROLES; `role_mask` marks the roles the head was allowed to pick. Policy-gradient
    training needs exactly this per turn."""

    feature: np.ndarray
    agent: int
    role: int
    role_mask: tuple[bool, ...]

    def log_prob_grad(self, weights: np.ndarray) -> np.ndarray:
        """d log pi(this decision) / dW for head weights W of shape (agents + len(ROLES), d), with the roles
        the head was allowed then: the score function policy-gradient training (trinity.evolve.on_policy)
        is handed with every recorded decision, so evolution needs no head code of its own."""
        weights = np.asarray(weights, dtype=np.float64)
        allowed = [ROLES[i] for i, m in enumerate(self.role_mask) if m]
        head = RoutingHead(weights, weights.shape[0] - len(ROLES), allowed)
        return head.log_prob_grad(self.feature, self.agent, self.role)


class RoutingHead:
    def __init__(self, weights: np.ndarray, n_agents: int, allowed_roles: Sequence[str] | None = None,
                 norm: FeatureNorm | None = None, turn_bias: np.ndarray | None = None):
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim != 2 or weights.shape[0] != n_agents + len(ROLES):
            raise ValueError(f"head weights must have shape ({n_agents + len(ROLES)}, d), got {weights.shape}")
        if norm is not None and norm.dim != weights.shape[1]:
            raise ValueError(f"feature statistics have {norm.dim} dimensions, the head reads {weights.shape[1]}")
        if turn_bias is not None:
            turn_bias = np.asarray(turn_bias, dtype=np.float64)
            if turn_bias.ndim != 2 or turn_bias.shape[1] != weights.shape[0] or not len(turn_bias):
                raise ValueError(f"a per-turn prior must have shape (turns, {weights.shape[0]}), got {turn_bias.shape}")
        self.weights = weights
        self.turn_bias = turn_bias
        self.norm = norm
        self.n_agents = n_agents
        self.allowed_roles = check_roles(allowed_roles)
        self.role_mask = np.array([r in self.allowed_roles for r in ROLES])

    @staticmethod
    def num_params(n_agents: int, hidden_size: int) -> int:
        return (n_agents + len(ROLES)) * hidden_size

    @property
    def hidden_size(self) -> int:
        return int(self.weights.shape[1])

    def inputs(self, feature: np.ndarray) -> np.ndarray:
        """What W multiplies: the feature, standardised when the head holds a FeatureNorm."""
        f = np.asarray(feature, dtype=np.float64)
        return f if self.norm is None else self.norm.apply(f)

    def prior(self, turn: int) -> np.ndarray | None:
        """The per-turn prior's logits at `turn` (its last row past the table); None without one."""
        if self.turn_bias is None:
            return None
        row: np.ndarray = self.turn_bias[min(max(int(turn), 0), len(self.turn_bias) - 1)]
        return row

    def logits(self, feature: np.ndarray, turn: int = 0) -> tuple[np.ndarray, np.ndarray]:
        z = self.weights @ self.inputs(feature)
        prior = self.prior(turn)
        if prior is not None:
            z = z + prior
        return z[: self.n_agents], z[self.n_agents :]

    def probabilities(self, feature: np.ndarray, turn: int = 0) -> tuple[np.ndarray, np.ndarray]:
        agent_logits, role_logits = self.logits(feature, turn)
        return softmax(agent_logits), softmax(role_logits, self.role_mask)

    def choose(self, feature: np.ndarray, rng: np.random.Generator | None, mode: str = "sample",
               turn: int = 0) -> tuple[int, str]:
        """(agent index, role). Sampling draws exactly two uniforms from `rng`: agent first, then role.
        Argmax breaks exact ties with `rng` (argmax_tie)."""
        return self.choose_from(*self.probabilities(feature, turn), rng, mode)

    def choose_from(self, p_agent: np.ndarray, p_role: np.ndarray, rng: np.random.Generator | None,
                    mode: str = "sample") -> tuple[int, str]:
        """`choose` on probabilities already computed (`probabilities(feature)`), with the same draws."""
        if mode == "argmax":
            return argmax_tie(p_agent, rng), ROLES[argmax_tie(p_role, rng)]
        if mode != "sample":
            raise ValueError(f"routing mode must be one of {ROUTING_MODES}, got {mode!r}")
        if rng is None:
            raise ValueError("sampling needs an explicit numpy Generator (the episode's seeded rng)")
        return draw(p_agent, rng.random()), ROLES[draw(p_role, rng.random())]

    def log_prob_grad(self, feature: np.ndarray, agent: int, role: int | str, turn: int = 0) -> np.ndarray:
        """d log pi(agent, role | feature) / dW, shape of W: outer(onehot - softmax, inputs(feature)) per
        block (the standardised feature under a FeatureNorm: the logits are linear in W with that input).

        Disallowed role rows get zero gradient (their probability is 0 whatever their logits)."""
        role = ROLES.index(role) if isinstance(role, str) else int(role)
        p_agent, p_role = self.probabilities(feature, turn)
        d_agent, d_role = -p_agent, -p_role
        d_agent[agent] += 1.0
        d_role[role] += 1.0
        return np.outer(np.concatenate([d_agent, d_role]), self.inputs(feature))

    def log_prob(self, feature: np.ndarray, agent: int, role: int | str, turn: int = 0) -> float:
        role = ROLES.index(role) if isinstance(role, str) else int(role)
        p_agent, p_role = self.probabilities(feature, turn)
        return float(np.log(p_agent[agent]) + np.log(p_role[role]))


def argmax_tie(p: np.ndarray, rng: np.random.Generator | None) -> int:
    """The most probable index; exact ties (a zero head: every agent equally likely) are broken uniformly by
    one draw from the episode's seeded rng, not towards index 0, so x0 under argmax routing is uniform
    over the tied choices instead of "model 0 as Worker". Without an rng: the first maximum."""
    p = np.asarray(p, dtype=np.float64)
    top = np.flatnonzero(p >= p.max())
    if len(top) == 1 or rng is None:
        return int(top[0])
    return int(top[int(rng.integers(len(top)))])


def draw(p: np.ndarray, u: float) -> int:
    """Inverse-CDF draw: reproducible from the uniform alone, immune to rounding at the top end
    (never returns an index of probability 0). Plain Python on the few entries a head has (numpy's
    per-call overhead is most of the cost there): the running sum and the total are added in order, as
    numpy's cumsum and its sum of fewer than 8 numbers do."""
    values = p.tolist() if isinstance(p, np.ndarray) else [float(x) for x in p]
    if len(values) >= 8:
        arr = np.asarray(values, dtype=np.float64)
        last = int(np.flatnonzero(arr > 0)[-1])
        return int(min(np.searchsorted(np.cumsum(arr), u * arr.sum(), side="right"), last))
    total = 0.0
    for v in values:
        total += v
    target = u * total
    last = max(i for i, v in enumerate(values) if v > 0)
    running = 0.0
    for i, v in enumerate(values):
        running += v
        if running > target:
            return min(i, last)
    return last
