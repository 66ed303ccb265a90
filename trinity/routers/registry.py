"""Router names -> router classes (RouteLLM's ROUTER_CLS).

Evaluation methods (trinity.eval.methods) build their baselines from this table, and one test runs
every entry through an episode, so a router added here is exercised without further wiring. Each
class takes its own constructor arguments (an agent index, a pool size, a wrapped coordinator router).
"""

from __future__ import annotations

from collections.abc import Callable

from trinity.contracts import Router
from trinity.coordinator.router import CoordinatorRouter
from trinity.routers.baselines import RandomRouter, RoleOnlyRouter, SingleWorkerRouter, WorkerVerifierLoopRouter
from trinity.routers.masked import MaskedRouter

ROUTER_CLS: dict[str, Callable[..., Router]] = {   # classes, each with its own constructor arguments
    "coordinator": CoordinatorRouter,
    "masked": MaskedRouter,
    "single": SingleWorkerRouter,
    "random": RandomRouter,
    "loop": WorkerVerifierLoopRouter,
    "roles": RoleOnlyRouter,
}
