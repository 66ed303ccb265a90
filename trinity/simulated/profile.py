"""What one simulated model does, read from its pool config entry (`pool.models.<name>.simulated`).

    simulated:
      worker: {default: 0.2, mmlu: 0.9}          # P(a Worker answer is correct), per suite
      verifier: {accept_correct: 0.9, accept_wrong: 0.2}
      thinker: {valid: 0.9, suggest_worker: 0.5}  # P(reply has both tags); P(it names worker | valid)
      tokens: {worker: 300, thinker: 60, verifier: 8}   # completion tokens per call
      latency_s: 0.0

Every outcome is a deterministic function of (the run's outcome seed, model, item, role, sample index,
the answer being judged): `draw(...)` hashes them, so common random numbers and the response cache
behave as they do with real models, and the oracle (oracle.py) computes exact expectations. The outcome
seed is `pool.outcome_seed` (`${seed}`, the run's root seed, in conf/pool/simulated.yaml), sent in every
request: two runs with different seeds see independent outcome tables, two runs with the same seed the
same one, and every variant of one seed shares it (so their episodes pair). Seed 0 adds nothing to the
hash: its table is the one every run saw before the outcome seed existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trinity.config_schema.pool import PoolConfig
from trinity.errors import ConfigError

ROLE_TOKENS = {"worker": 300, "thinker": 60, "verifier": 8}


@dataclass(frozen=True)
class SimulatedModel:
    name: str
    model_id: str
    worker: Mapping[str, float]              # suite -> P(correct); key "default" for unlisted suites
    accept_correct: float = 0.9
    accept_wrong: float = 0.2
    thinker_valid: float = 0.9
    suggest_worker: float = 0.5
    tokens: Mapping[str, int] = field(default_factory=lambda: dict(ROLE_TOKENS))
    latency_s: float = 0.0

    def worker_accuracy(self, suite: str) -> float:
        if suite in self.worker:
            return float(self.worker[suite])
        if "default" in self.worker:
            return float(self.worker["default"])
        raise KeyError(f"simulated model {self.name!r} has no worker accuracy for suite {suite!r} and no default")

    def completion_tokens(self, role: str) -> int:
        return int(self.tokens.get(role, ROLE_TOKENS.get(role, 100)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_config(self) -> dict[str, Any]:
        """The `pool.models.<name>.simulated` block that `parse_model` reads back to this model."""
        return {"worker": dict(self.worker),
                "verifier": {"accept_correct": self.accept_correct, "accept_wrong": self.accept_wrong},
                "thinker": {"valid": self.thinker_valid, "suggest_worker": self.suggest_worker},
                "tokens": dict(self.tokens), "latency_s": self.latency_s}


def _prob(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"config key '{key}' must be a probability in [0, 1], got {value!r}")
    return float(value)


def parse_model(name: str, model_id: str | None, sim: Mapping[str, Any] | None) -> SimulatedModel:
    """One `pool.models.<name>` entry (its model_id and `simulated` block) -> SimulatedModel; a bad value is a
    ConfigError naming its key."""
    where = f"pool.models.{name}.simulated"
    if not isinstance(sim, Mapping):
        raise ConfigError(f"config key '{where}' is missing: a simulated pool model needs its behaviour")
    known = {"worker", "verifier", "thinker", "tokens", "latency_s"}
    unknown = sorted(set(sim) - known)
    if unknown:
        raise ConfigError(f"config key '{where}': unknown keys {unknown}; known: {sorted(known)}")
    worker = sim.get("worker")
    if not isinstance(worker, Mapping) or not worker:
        raise ConfigError(f"config key '{where}.worker' must map suites (or 'default') to probabilities")
    worker = {str(k): _prob(v, f"{where}.worker.{k}") for k, v in worker.items()}
    verifier = sim.get("verifier") or {}
    thinker = sim.get("thinker") or {}
    tokens = dict(ROLE_TOKENS)
    for role, n in (sim.get("tokens") or {}).items():
        if role not in ROLE_TOKENS or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"config key '{where}.tokens.{role}' must be a positive int for one "
                              f"of {list(ROLE_TOKENS)}")
        tokens[role] = n
    latency = sim.get("latency_s", 0.0)
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or latency < 0:
        raise ConfigError(f"config key '{where}.latency_s' must be a number >= 0, got {latency!r}")
    return SimulatedModel(
        name=str(name), model_id=str(model_id or name), worker=worker,
        accept_correct=_prob(verifier.get("accept_correct", 0.9), f"{where}.verifier.accept_correct"),
        accept_wrong=_prob(verifier.get("accept_wrong", 0.2), f"{where}.verifier.accept_wrong"),
        thinker_valid=_prob(thinker.get("valid", 0.9), f"{where}.thinker.valid"),
        suggest_worker=_prob(thinker.get("suggest_worker", 0.5), f"{where}.thinker.suggest_worker"),
        tokens=tokens, latency_s=float(latency),
    )


def parse_profile(pool: PoolConfig) -> list[SimulatedModel]:
    """Every model of a simulated pool (the typed pool section), in head order."""
    if not pool.models:
        raise ConfigError("config key 'pool.models' must list the simulated models")
    return [parse_model(str(name), m.model_id, m.simulated) for name, m in pool.models.items()]


def uniform(*parts: Any) -> float:
    """A uniform number in [0, 1) that is a pure function of `parts` (stable across processes)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


def draw(outcome_seed: int, *parts: Any) -> float:
    """The uniform number behind one simulated outcome of the run seeded `outcome_seed`."""
    return uniform(*parts) if int(outcome_seed) == 0 else uniform("outcome-seed", int(outcome_seed), *parts)


def worker_right(model: SimulatedModel, item_uid: str, suite: str, sample: int, outcome_seed: int = 0,
                 role: str = "worker") -> bool:
    """Whether `model`'s answer to the item at this sample index is the right one (an answering role:
    worker, or the Mixture-of-Agents aggregator). The server and the hindsight bound both read it here."""
    return draw(outcome_seed, model.model_id, item_uid, role, sample) < model.worker_accuracy(suite)
