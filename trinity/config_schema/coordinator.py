"""Schema of the `coordinator` group: the read-only backbone, the head's inputs and the feature cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from trinity.config_schema.choices import BackboneSource, Dtype, FeatureNormalize, RoutingMode
from trinity.config_schema.fields import number
from trinity.errors import ConfigError


@dataclass(frozen=True)
class Backbone:
    id: str = MISSING                      # an asset name, a hub id or a GGUF path (by source)
    source: BackboneSource = BackboneSource.hub
    revision: str | None = None
    dtype: Dtype = Dtype.float32
    device: str = "auto"                   # auto | cpu | cuda | cuda:N | mps


@dataclass(frozen=True)
class Svf:
    enabled: bool = False
    matrices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Features:
    normalize: FeatureNormalize = FeatureNormalize.none   # a params.yaml from before this key: raw features
    rank: int | None = number(None, ge=0)              # null: every direction (the paper); k: the top k principal
    #                                                       directions of the standardised training states

    def check(self, key: str) -> None:
        if self.rank is None:
            return
        if self.normalize == FeatureNormalize.none:
            raise ConfigError(f"config key '{key}.rank' needs '{key}.normalize' standardize or rebalance (the "
                              "principal directions are those of the standardised training states), got "
                              "normalize=none")
        if self.rank == 0 and self.normalize != FeatureNormalize.rebalance:
            raise ConfigError(f"config key '{key}.rank' = 0 leaves the head nothing to read under "
                              "normalize=standardize: use rebalance (the shared direction alone: a prompt-independent "
                              "policy) or a rank >= 1")


def parse_max_padding(value: object) -> str | float | None:
    """`coordinator.feature_cache.max_padding`: "auto", None (no bound) or a fraction >= 0."""
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        return None
    if isinstance(value, str) and value.lower() == "auto":
        return "auto"
    try:
        fraction = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError("config key 'coordinator.feature_cache.max_padding' must be auto, none or a "
                          f"number >= 0, got {value!r}") from None
    if fraction < 0:
        raise ConfigError(f"config key 'coordinator.feature_cache.max_padding' must be >= 0, got {fraction}")
    return fraction


@dataclass(frozen=True)
class FeatureCache:
    memory_items: int = number(4096, ge=0)
    disk: bool = True
    prefix_tokens: int = number(32768, ge=0)
    max_wait_ms: float = number(2, ge=0)
    max_batch: int = number(16, gt=0)
    max_padding: Any = "auto"              # auto | none | a fraction >= 0

    def check(self, key: str) -> None:
        parse_max_padding(self.max_padding)


@dataclass(frozen=True)
class CoordinatorConfig:
    backbone: Backbone = field(default_factory=Backbone)
    roles: list[str] | None = field(default_factory=lambda: ["worker", "thinker", "verifier"])   # null: all three
    token_position: int = -2
    svf: Svf = field(default_factory=Svf)
    routing: RoutingMode = RoutingMode.sample
    features: Features = field(default_factory=Features)
    feature_cache: FeatureCache = field(default_factory=FeatureCache)

    def check(self, key: str) -> None:
        from trinity.contracts import ROLES

        if self.roles is None:
            return
        roles = [str(r) for r in self.roles]
        if not roles or any(r not in ROLES for r in roles) or len(set(roles)) != len(roles) or "worker" not in roles:
            raise ConfigError(f"config key '{key}.roles' must list distinct roles from {list(ROLES)} including "
                              f"worker (only a Worker answers), got {roles}")
