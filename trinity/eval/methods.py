"""The registry of evaluation methods: name -> how to build its router (and its turn limit).

`single:<model>` and `loop:<model>` expand per pool model; `trinity` is the trained coordinator.
Users add their own with `register_method`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from trinity.errors import ConfigError
from trinity.eval.routers import RandomRouter, SingleWorkerRouter, WorkerVerifierLoopRouter
from trinity.routing import Router


@dataclass(frozen=True)
class Method:
    name: str
    build: Callable[["MethodContext"], Router]
    max_turns: int | None = None    # None: the protocol's K


@dataclass
class MethodContext:
    agents: list[str]
    strongest: int                  # index of the pool model assumed strongest (config order: first)
    coordinator_router: Callable[[], Router] | None = None


_FACTORIES: dict[str, Callable[[str | None, MethodContext], Method]] = {}


def register_method(name: str, factory: Callable[[str | None, MethodContext], Method]) -> None:
    _FACTORIES[name] = factory


def _trinity(arg, ctx: MethodContext) -> Method:
    if ctx.coordinator_router is None:
        raise ConfigError("method 'trinity' needs a trained coordinator")
    return Method("trinity", lambda c: c.coordinator_router())


def _single(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx)
    return Method(f"single:{ctx.agents[idx]}", lambda c: SingleWorkerRouter(idx), max_turns=1)


def _loop(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx) if arg else ctx.strongest
    return Method(f"loop:{ctx.agents[idx]}", lambda c: WorkerVerifierLoopRouter(idx))


def _random(arg, ctx: MethodContext) -> Method:
    return Method("random", lambda c: RandomRouter(len(c.agents)))


def _agent(arg: str | None, ctx: MethodContext) -> int:
    if arg is None:
        raise ConfigError("eval method needs a pool model, e.g. single:<model>")
    if arg not in ctx.agents:
        raise ConfigError(f"config key 'eval.methods': unknown pool model '{arg}' (pool: {', '.join(ctx.agents)})")
    return ctx.agents.index(arg)


register_method("trinity", _trinity)
register_method("single", _single)
register_method("loop", _loop)
register_method("random", _random)


def expand(names: list[str], ctx: MethodContext) -> list[Method]:
    """`single_worker` expands to one `single:<model>` per pool model."""
    out: list[Method] = []
    for raw in names:
        if raw == "single_worker":
            out.extend(_single(a, ctx) for a in ctx.agents)
            continue
        name, _, arg = raw.partition(":")
        if name not in _FACTORIES:
            raise ConfigError(f"config key 'eval.methods': unknown method '{raw}' (known: {', '.join(_FACTORIES)})")
        out.append(_FACTORIES[name](arg or None, ctx))
    return out
