"""Support for the serving tests (no tests here).

A steerable head: the feature of a transcript is one-hot on how many Worker answers (reference
thoughts) it holds, and `plan[k] = (agent, role)` sets the head's argmax after k answers. The pool is a
real loopback HTTP stub (pool_stub.StubServer) whose replies echo the request's tag `REQ-<id>`, so a
reply that reached the wrong request shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pool_stub import completion

from trinity.contracts import ROLES
from trinity.coordinator.head import RoutingHead

AGENTS = ("alpha", "beta", "gamma")
TAG = re.compile(r"REQ-[A-Za-z0-9_]+")
THOUGHT = "Reference thought "


class OneHotFeatures:
    """FeatureService stand-in: one-hot on the number of reference thoughts (capped at d-1)."""

    def __init__(self, d: int):
        self.d = d
        self.calls = 0

    async def features(self, transcript: str, svf_deltas: Any = None) -> np.ndarray:
        self.calls += 1
        feature = np.zeros(self.d)
        feature[min(transcript.count(THOUGHT), self.d - 1)] = 1.0
        return feature

    def close(self) -> None:
        pass


@dataclass
class SteeredRouter:
    """What EpisodeRunner needs of a CoordinatorRouter: head, service, svf_deltas."""
    head: RoutingHead
    service: OneHotFeatures
    svf_deltas: Any = None


def steered(plan: Sequence[tuple[str, str]], agents: Sequence[str] = AGENTS,
            second: Sequence[str] | None = None) -> SteeredRouter:
    """plan[k] = (agent, role) the head prefers after k answers; `second[k]` the agent it likes next best."""
    d = len(plan)
    w = np.zeros((len(agents) + len(ROLES), d))
    for k, (agent, role) in enumerate(plan):
        w[list(agents).index(agent), k] = 4.0
        if second is not None:
            w[list(agents).index(second[k]), k] = 2.0
        w[len(agents) + ROLES.index(role), k] = 4.0
    return SteeredRouter(RoutingHead(w, len(agents)), OneHotFeatures(d))


def role_of(body: dict) -> str:
    system = (body.get("messages") or [{}])[0].get("content", "")
    for role in ROLES:
        if system.startswith(f"You are the {role.capitalize()}"):
            return role
    return "unknown"


def tag_of(body: dict) -> str:
    found = TAG.findall(" ".join(str(m.get("content", "")) for m in body.get("messages") or []))
    return found[0] if found else "REQ-none"


def echo_roles(body: dict, *, delay_s: float = 0.0, thinker_role: str = "verifier"):
    """Worker: an answer naming the request's tag; Verifier: ACCEPT; Thinker: a valid suggestion."""
    role, tag = role_of(body), tag_of(body)
    if role == "worker":
        return completion(f"Answer for {tag}: 42 <idea>idea of {tag}</idea>", delay_s=delay_s)
    if role == "verifier":
        return completion("ACCEPT", delay_s=delay_s)
    return completion(f"<suggestion>check {tag}</suggestion><suggested_role>{thinker_role}</suggested_role>",
                      delay_s=delay_s)


def serve_cfg(base_url: str, cache_dir: Path, *overrides: str, models: Any = AGENTS):
    """The typed config with the pool (`models`) pointed at the stub (no retries, so failures are fast)."""
    from pool_stub import stub_pool_mapping

    from trinity import config

    cfg = config.load(None, ["experiment=local_live", f"paths.cache={cache_dir}", "coordinator.backbone.id=tiny-llama",
                             "protocol.max_turns=4",
                             "coordinator.features.normalize=none", *overrides])   # no cached states here
    return config.with_values(cfg, {"pool": stub_pool_mapping(base_url, models=list(models),
                                                              retry={"max_retries": 0})})


def make_app(cfg, router: SteeredRouter, **settings_changes: Any):
    """create_app over the stub pool with a steered head; `settings_changes` replace keys of the serve section."""
    import dataclasses

    from trinity.pool.client import PoolClient
    from trinity.serve.app import create_app
    from trinity.serve.request_episode import EpisodeRunner
    from trinity.serve.settings import ServeSettings

    settings = ServeSettings.from_config(cfg)
    settings = dataclasses.replace(settings, config=dataclasses.replace(settings.config, **settings_changes))
    pool = PoolClient.from_config(cfg.pool, cache_mode="off")
    runner = EpisodeRunner(pool, list(AGENTS), cfg.protocol, router, root_seed=int(cfg.seed),
                           answer_first=settings.config.answer_first)
    return create_app(settings, runner, on_shutdown=pool.aclose)
