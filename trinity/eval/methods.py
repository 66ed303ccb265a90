"""The registry of evaluation methods: name -> how to build its router (or its own episode function).
The baselines' router classes come from the router registry (trinity.routers.registry.ROUTER_CLS).

Names in `eval.methods` are `<method>` or `<method>:<argument>`:
- `trinity`: the trained coordinator, routed as configured (coordinator.routing, `sample` by default);
  `trinity:argmax` / `trinity:sample`: routed that way (its most likely agent and role, or a draw from
  the head's distribution); `ablation:<name>`: a coordinator trained by the ablation stage;
- `single:<model>`: that model as the only Worker, one turn;
- `roles:<model>`: that model as the only agent, the trained coordinator picks only the role;
- `random`: uniformly random agent and role; `loop[:<model>]`: a fixed Worker -> Verifier loop;
- `moa[:<aggregator>]`: Mixture-of-Agents, every model answers, one merges (trinity.eval.moa).
Groups expand to several methods: `single_worker` and `role_select` to one per pool model, `ablations`
to one per trained ablation. A method whose prerequisite is missing (no trained coordinator, no
ablation folder) is skipped with its reason, never a crash. Users add their own with
`register_method` / `register_group`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trinity.contracts import ROUTING_MODES, Router
from trinity.errors import ConfigError
from trinity.eval.episode_functions import EpisodeFn
from trinity.eval.moa import moa_episode, moa_prompts
from trinity.routers.registry import ROUTER_CLS


class MethodSkipped(ConfigError):
    """A method cannot run with what exists (e.g. no trained coordinator); the evaluation goes on without it."""


@dataclass(frozen=True)
class Method:
    name: str
    build: Callable[[MethodContext], Router | None]
    max_turns: int | None = None        # None: the protocol's K
    episode: EpisodeFn | None = None    # replaces the turn protocol (the router is then unused)
    protocol: Any = None                # None: cfg.protocol (an ablation may bring its variant's)
    fingerprint: str = ""               # what else decides its results (e.g. a digest of the trained
    #                                     parameters), so saved chunks of another coordinator are not reused


@dataclass(frozen=True)
class Ablation:
    """A trained ablation coordinator, ready to route: its router factory and the protocol it ran with."""
    router: Callable[[], Router]
    protocol: Any = None
    fingerprint: str = ""


@dataclass
class MethodContext:
    agents: list[str]
    strongest: int                  # index of the pool model assumed strongest (config order: first)
    coordinator_router: Callable[[str], Router] | None = None   # routing mode (argmax | sample) -> router
    no_coordinator: str = "none was given"             # why coordinator_router is None
    coordinator_routing: str = "sample"                # the configured mode (coordinator.routing)
    coordinator_fingerprint: str = ""                  # e.g. a digest of the trained parameters
    moa: Any = None                 # cfg.eval.moa: the Mixture-of-Agents prompts
    ablation_names: Callable[[], list[str]] | None = None    # trained ablations present (raises MethodSkipped)
    load_ablation: Callable[[str], Ablation] | None = None   # name -> Ablation (raises MethodSkipped)
    roles: tuple[str, ...] | None = None   # the roles the coordinator may pick (random routes over the same)


@dataclass(frozen=True)
class Skipped:
    method: str
    reason: str


_FACTORIES: dict[str, Callable[[str | None, MethodContext], Method]] = {}
_GROUPS: dict[str, Callable[[MethodContext], list[str]]] = {}


def register_method(name: str, factory: Callable[[str | None, MethodContext], Method]) -> None:
    _FACTORIES[name] = factory


def register_group(name: str, expand_names: Callable[[MethodContext], list[str]]) -> None:
    """A name in eval.methods that stands for several methods (e.g. one per pool model)."""
    _GROUPS[name] = expand_names


def _coordinator(ctx: MethodContext, method: str) -> Callable[[str], Router]:
    if ctx.coordinator_router is None:
        raise MethodSkipped(f"needs the trained coordinator ({ctx.no_coordinator})")
    return ctx.coordinator_router


def mode_fingerprint(fingerprint: str, mode: str) -> str:
    """The routing mode is part of what decides a coordinator's results, so saved chunks of
    `trinity` (sampling) are never reused for `trinity:argmax` or the other way round."""
    return f"{fingerprint}-{mode}" if fingerprint else mode


def _trinity(arg, ctx: MethodContext) -> Method:
    if arg is not None and arg not in ROUTING_MODES:
        raise ConfigError(f"config key 'eval.methods': 'trinity:{arg}' is not a routing mode "
                          f"(use trinity, {', '.join(f'trinity:{m}' for m in ROUTING_MODES)})")
    router = _coordinator(ctx, "trinity")
    mode = arg or ctx.coordinator_routing
    return Method(f"trinity:{arg}" if arg else "trinity", lambda c: router(mode),
                  fingerprint=mode_fingerprint(ctx.coordinator_fingerprint, mode))


def _single(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx, "single")
    return Method(f"single:{ctx.agents[idx]}", lambda c: ROUTER_CLS["single"](idx), max_turns=1)


def _roles(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx, "roles")
    name = f"roles:{ctx.agents[idx]}"
    router = _coordinator(ctx, name)
    return Method(name, lambda c: ROUTER_CLS["roles"](router(ctx.coordinator_routing), idx),
                  fingerprint=ctx.coordinator_fingerprint)


def _loop(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx, "loop") if arg else ctx.strongest
    return Method(f"loop:{ctx.agents[idx]}", lambda c: ROUTER_CLS["loop"](idx))


def _random(arg, ctx: MethodContext) -> Method:
    roles = ctx.roles
    return Method("random", lambda c: ROUTER_CLS["random"](len(c.agents), *(() if roles is None else (roles,))))


def _moa(arg, ctx: MethodContext) -> Method:
    idx = _agent(arg, ctx, "moa") if arg else ctx.strongest
    episode = moa_episode(idx, moa_prompts(ctx.moa))
    return Method(f"moa:{ctx.agents[idx]}", lambda c: None, episode=episode)


def _ablation(arg, ctx: MethodContext) -> Method:
    if not arg:
        raise ConfigError("config key 'eval.methods': 'ablation' needs a name, e.g. ablation:no_thinker")
    name = f"ablation:{arg}"
    if ctx.load_ablation is None:
        raise MethodSkipped("ablation coordinators cannot be loaded here")
    ablation = ctx.load_ablation(arg)
    return Method(name, lambda c: ablation.router(), protocol=ablation.protocol, fingerprint=ablation.fingerprint)


def _agent(arg: str | None, ctx: MethodContext, method: str) -> int:
    if arg is None:
        raise ConfigError(f"config key 'eval.methods': '{method}' needs a pool model, e.g. {method}:<model>")
    if arg not in ctx.agents:
        raise ConfigError(f"config key 'eval.methods': unknown pool model '{arg}' (pool: {', '.join(ctx.agents)})")
    return ctx.agents.index(arg)


def _ablation_group(ctx: MethodContext) -> list[str]:
    if ctx.ablation_names is None:
        raise MethodSkipped("ablation coordinators cannot be loaded here")
    return [f"ablation:{n}" for n in ctx.ablation_names()]


register_method("trinity", _trinity)
register_method("single", _single)
register_method("roles", _roles)
register_method("loop", _loop)
register_method("random", _random)
register_method("moa", _moa)
register_method("ablation", _ablation)
register_group("single_worker", lambda ctx: [f"single:{a}" for a in ctx.agents])
register_group("role_select", lambda ctx: [f"roles:{a}" for a in ctx.agents])
register_group("ablations", _ablation_group)


def expand_with_skips(names: list[str], ctx: MethodContext) -> tuple[list[Method], list[Skipped]]:
    """The methods to run, in config order without duplicates, and those skipped with why.
    A configuration mistake (unknown method or model) raises ConfigError."""
    out: list[Method] = []
    skipped: list[Skipped] = []
    for raw in names:
        group = _GROUPS.get(raw)
        try:
            members = group(ctx) if group is not None else [raw]
        except MethodSkipped as e:
            skipped.append(Skipped(raw, str(e)))
            continue
        for member in members:
            name, _, arg = member.partition(":")
            if name not in _FACTORIES:
                known = ", ".join([*_FACTORIES, *_GROUPS])
                raise ConfigError(f"config key 'eval.methods': unknown method '{member}' (known: {known})")
            try:
                method = _FACTORIES[name](arg or None, ctx)
            except MethodSkipped as e:
                skipped.append(Skipped(member, str(e)))
                continue
            if all(m.name != method.name for m in out):
                out.append(method)
    return out, skipped


def expand(names: list[str], ctx: MethodContext) -> list[Method]:
    """Like expand_with_skips, but a method that cannot run raises MethodSkipped."""
    methods, skipped = expand_with_skips(names, ctx)
    if skipped:
        raise MethodSkipped(f"method '{skipped[0].method}' {skipped[0].reason}")
    return methods
