"""The population size a run will use: evolve.popsize, or the strategy's default from the parameter count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES

ASSUMED_HIDDEN = 1024       # hidden size assumed for an unknown backbone (popsize only, through ln n)


def backbone_arch(backbone: Any, model_cache: Any) -> dict[str, int] | None:
    """The backbone's architecture as the coordinator part knows it (trinity.coordinator.backbone_files)."""
    from trinity.coordinator.backbone_files import architecture

    return architecture(backbone, model_cache)


def _svf_rank(name: str, arch: Mapping[str, int]) -> int:
    d = int(arch["hidden_size"])
    heads = int(arch.get("num_attention_heads") or 1)
    head_dim = int(arch.get("head_dim") or d // heads)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "q_proj" or leaf == "o_proj":
        return min(d, heads * head_dim)
    if leaf in ("k_proj", "v_proj"):
        return min(d, int(arch.get("num_key_value_heads") or heads) * head_dim)
    return d


def resolve_popsize(cfg: TrinityConfig, n_agents: int, notes: set[str]) -> int:
    """evolve.popsize, or ceil(4 + 3 ln n) as the strategy computes it from the parameter count."""
    from trinity.evolve.strategies import default_popsize

    popsize = cfg.evolve.popsize
    if popsize is not None:
        return popsize
    arch = backbone_arch(cfg.coordinator.backbone, cfg.paths.model_cache)
    if arch is None:
        arch = {"hidden_size": ASSUMED_HIDDEN}
        notes.add(f"popsize: backbone {cfg.coordinator.backbone.id} unknown here; hidden size {ASSUMED_HIDDEN} assumed")
    n = (n_agents + len(ROLES)) * int(arch["hidden_size"])
    svf = cfg.coordinator.svf
    if svf.enabled:
        n += sum(_svf_rank(str(m), arch) for m in svf.matrices)
    return default_popsize(n)

