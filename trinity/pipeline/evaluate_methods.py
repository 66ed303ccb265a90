"""The methods the evaluate stage compares, and what they are built from.

Methods come from the registry in trinity.eval.methods (`eval.methods`). They are built from the trained
coordinator (when one is saved), the pool, and the coordinators the ablation stage trained, each routed
with its variant's config. A method that cannot run is skipped with the reason, or is an error when the
caller asks to be strict.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trinity.assembly.runtime import StageRuntime
from trinity.config import as_written, read_mapping, with_values
from trinity.config_schema import TrinityConfig
from trinity.coordinator.head import section_roles
from trinity.coordinator.saved import coordinator_file
from trinity.errors import TrinityError
from trinity.eval import methods as method_registry
from trinity.pipeline.ablation_folders import ablation_names, ablations_root


def load_checked_params(coord, path: Path):
    """The saved parameters, refusing a coordinator saved for another pool, backbone, layout or feature
    normalisation; under standardize its routers use the statistics stored with it (Coordinator.read_params)."""
    return coord.read_params(path)


def fingerprint(params, extra=None) -> str:
    """A short digest of trained parameters (and a variant's overrides) for chunk file names."""
    h = hashlib.sha256(np.ascontiguousarray(params, dtype=np.float64).tobytes())
    h.update(json.dumps(extra or {}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


def variant_config(cfg: TrinityConfig, overrides: dict) -> TrinityConfig:
    """`cfg` with an ablation variant's overrides (dotted key -> value) applied to its document (a key the
    document leaves to the schema's default is added), typed again."""
    return with_values(cfg, overrides or {})


def _same_router_config(a: TrinityConfig, b: TrinityConfig) -> bool:
    """The coordinator of `b` would route exactly like that of `a` (same backbone, head, prompt)."""
    def part(c: TrinityConfig) -> tuple:
        return as_written(c)["coordinator"], c.protocol.coordinator_system, list(c.pool.models)
    return part(a) == part(b)


# The coordinator of an ablation variant's config (the evaluate stage's default: stage_runtime.stage_coordinator).
VariantCoordinator = Callable[[TrinityConfig], Any]


def load_ablation(cfg: TrinityConfig, ctx: StageRuntime, name: str,
                  variant_coordinator: VariantCoordinator) -> method_registry.Ablation:
    """The coordinator the ablation stage saved in `<paths.ablations>/<name>/`, routed with its variant's
    config (`variant.yaml`: dotted key -> value). A variant that changes the coordinator gets its own
    (`variant_coordinator(variant)`: its own backbone copy, e.g. for SVF or another token position); its router
    runs on the stage's runtime `ctx` (its loop and pool). Anything missing or mismatched skips it with the
    reason."""
    folder = ablations_root(cfg) / name
    path = folder / "coordinator.safetensors"
    if not path.is_file():
        raise method_registry.MethodSkipped(f"no {path} (its training has not finished)")
    overrides: dict = {}
    if (folder / "variant.yaml").is_file():
        loaded = read_mapping(folder / "variant.yaml")
        if not isinstance(loaded, dict):
            raise method_registry.MethodSkipped(f"{folder / 'variant.yaml'} is not a mapping of config keys to values")
        overrides = loaded
    try:
        variant = variant_config(cfg, overrides)
        own_context = not _same_router_config(cfg, variant)
        same_features = (variant.coordinator.backbone == cfg.coordinator.backbone
                         and variant.coordinator.token_position == cfg.coordinator.token_position)
        if own_context and not same_features:  # cache_states computed features for the main token position
            variant = variant_config(cfg, {**overrides, "paths.states": str(folder / "states")})
        coordinator: Any = variant_coordinator(variant) if own_context else ctx.coordinator
        params = load_checked_params(coordinator, path)
    except TrinityError as e:
        raise method_registry.MethodSkipped(str(e)) from None
    protocol = variant.protocol if variant.protocol != cfg.protocol else None
    routing = variant.coordinator.routing if own_context else cfg.coordinator.routing

    def router() -> Any:
        return coordinator.router_for(np.asarray(params, dtype=np.float64), mode=routing)

    return method_registry.Ablation(router=router, protocol=protocol, fingerprint=fingerprint(params, overrides))


def method_context(cfg: TrinityConfig, ctx: StageRuntime, coordinator_path: Path,
                   variant_coordinator: VariantCoordinator) -> method_registry.MethodContext:
    """What the methods are built from: the trained coordinator (when saved), the pool, the ablations."""
    params = None
    if coordinator_file(coordinator_path).exists():
        params = load_checked_params(ctx.coordinator, coordinator_file(coordinator_path))
    return method_registry.MethodContext(
        agents=ctx.agents, strongest=0,
        coordinator_router=(lambda mode: ctx.router_for(params, mode)) if params is not None else None,
        no_coordinator=f"none at {coordinator_file(coordinator_path)}",
        coordinator_routing=str(cfg.coordinator.routing),
        coordinator_fingerprint=fingerprint(params) if params is not None else "",
        moa=cfg.eval.moa,
        ablation_names=lambda: ablation_names(cfg),
        load_ablation=lambda name: load_ablation(cfg, ctx, name, variant_coordinator),
        roles=section_roles(cfg.coordinator.roles),
    )


def choose_methods(cfg: TrinityConfig, mctx: method_registry.MethodContext, *, strict: bool,
                   say: Callable[[str], None]) -> tuple[list, list]:
    """The methods of `eval.methods` that can run, and the skipped ones with their reasons (each told to
    `say`); under `strict` a method that cannot run is an error instead."""
    methods, skipped = method_registry.expand_with_skips(list(cfg.eval.methods), mctx)
    if strict and skipped:
        raise method_registry.MethodSkipped("; ".join(f"method '{s.method}' cannot run: {s.reason}" for s in skipped))
    for s in skipped:
        say(f"evaluate: skipping {s.method}: {s.reason}")
    return methods, skipped
