"""The Coordinator facade that evolution, evaluation and serving use.

    coord = Coordinator.from_config(cfg)            # whole composed config
    coord.num_params, coord.layout, coord.hidden_size
    router = coord.router_for(params)               # one candidate; all routers share one batching service
    coord.save(path, params, extra_meta) ; coord, params = Coordinator.load(path, cfg)
    coord.precompute(transcripts)                   # (n, d) features, e.g. for the cache_states stage
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trinity.coordinator.backbone import Backbone, load_backbone
from trinity.coordinator.batching import resolve_max_padding
from trinity.coordinator.engine import FeatureEngine
from trinity.coordinator.feature_cache import FeatureCache
from trinity.coordinator.head import RoutingHead, check_roles
from trinity.coordinator.layout import ParamLayout
from trinity.coordinator.prompt import PromptRenderer
from trinity.coordinator.router import CoordinatorRouter
from trinity.coordinator.saved import check_metadata, load_params, save_params
from trinity.coordinator.service import FeatureService
from trinity.coordinator.svf import SVFAdapter
from trinity.errors import ConfigError


def configured_roles(cfg: Any) -> tuple[str, ...]:
    """`coordinator.roles` (default: all of ROLES) in ROLES order."""
    roles = cfg.coordinator.get("roles")
    try:
        return check_roles(None if roles is None else list(roles))
    except ValueError as e:
        raise ConfigError(f"config key 'coordinator.roles': {e}") from None


class Coordinator:
    def __init__(
        self,
        backbone: Backbone,
        pool_models: Sequence[str],
        system_template: str,
        *,
        token_position: int = -2,
        roles: Sequence[str] | None = None,
        svf_matrices: Sequence[str] = (),
        routing: str = "sample",
        memory_items: int = 4096,
        disk_cache: str | os.PathLike | None = None,
        prefix_tokens: int = 32768,
        max_batch: int = 16,
        max_padding: object = "auto",
        max_wait_s: float = 0.002,
    ):
        self.backbone = backbone
        self.pool_models = tuple(pool_models)
        self.token_position = int(token_position)
        self.roles = check_roles(roles)  # the roles the head may pick (ablations: no Thinker, no roles)
        self.routing = routing
        self.svf = SVFAdapter(backbone, list(svf_matrices)) if svf_matrices else None
        self.layout = ParamLayout(self.svf.matrices if self.svf else (), len(self.pool_models), backbone.hidden_size)
        self.renderer = PromptRenderer(backbone.tokenizer, system_template, len(self.pool_models))
        svf_names = ",".join(name for name, _ in self.layout.svf_matrices)
        namespace = f"{backbone.name}|{backbone.revision}|{backbone.dtype}|{self.token_position}|{svf_names}"
        self.cache = FeatureCache(namespace, memory_items, disk_cache)
        self.engine = FeatureEngine(
            backbone, self.renderer, token_position=self.token_position, svf=self.svf, cache=self.cache,
            prefix_tokens=prefix_tokens, max_batch=max_batch,
            max_padding=resolve_max_padding(max_padding, backbone.device.type),
        )
        self.service = FeatureService(self.engine, max_batch=max_batch, max_wait_s=max_wait_s)

    @classmethod
    def from_config(cls, cfg: Any, backbone: Backbone | None = None) -> "Coordinator":
        c = cfg.coordinator
        fc = c.get("feature_cache", {}) or {}
        svf = c.get("svf", {}) or {}
        disk = None
        if fc.get("disk", False):
            disk = Path(str(cfg.paths.cache)) / "features" / "features.sqlite"
        if backbone is None:
            backbone = load_backbone(c.backbone, cfg.paths.get("model_cache"))
        return cls(
            backbone,
            [str(name) for name in cfg.pool.models],
            str(cfg.protocol.coordinator_system),
            token_position=int(c.get("token_position", -2)),
            roles=configured_roles(cfg),
            svf_matrices=list(svf.get("matrices", []) or []) if svf.get("enabled", False) else (),
            routing=str(c.get("routing", "sample")),
            memory_items=int(fc.get("memory_items", 4096)),
            disk_cache=disk,
            prefix_tokens=int(fc.get("prefix_tokens", 32768)),
            max_batch=int(fc.get("max_batch", 16)),
            max_padding=fc.get("max_padding", "auto"),
            max_wait_s=float(fc.get("max_wait_ms", 2)) / 1000.0,
        )

    # ------------------------------------------------------------------ parameters and routers
    @property
    def num_params(self) -> int:
        return self.layout.size

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    def head_for(self, params: np.ndarray) -> RoutingHead:
        return RoutingHead(self.layout.head_weights(params), len(self.pool_models), self.roles)

    def router_for(self, params: np.ndarray, mode: str | None = None, *, record: bool = False) -> CoordinatorRouter:
        """A router for one candidate; `record=True` keeps its decisions (build one per episode then)."""
        return CoordinatorRouter(self.head_for(params), self.service, self.layout.svf_deltas(params),
                                 mode or self.routing, record=record)

    def precompute(self, transcripts: Sequence[str], svf_deltas: np.ndarray | None = None) -> np.ndarray:
        from trinity.coordinator.engine import FeatureRequest

        if not transcripts:
            return np.zeros((0, self.hidden_size), dtype=np.float32)
        return self.engine.features([FeatureRequest(t, svf_deltas) for t in transcripts])

    # ------------------------------------------------------------------ save / load
    def metadata(self) -> dict[str, Any]:
        return {
            "backbone_id": self.backbone.name,
            "backbone_revision": self.backbone.revision,
            "hidden_size": self.hidden_size,
            "pool_models": list(self.pool_models),
            "roles": list(self.roles),
            "token_position": self.token_position,
            "svf_matrices": [[name, rank] for name, rank in self.layout.svf_matrices],
            "num_params": self.num_params,
            "layout": self.layout.describe(),
            "system_prompt_sha256": hashlib.sha256(self.renderer.system.encode()).hexdigest(),
        }

    def save(self, path: str | os.PathLike, params: np.ndarray, extra_meta: dict[str, Any] | None = None) -> Path:
        params = self.layout.check(params)
        return save_params(path, params, {**(extra_meta or {}), **self.metadata()})

    @classmethod
    def load(cls, path: str | os.PathLike, cfg: Any, backbone: Backbone | None = None) -> tuple["Coordinator", np.ndarray]:
        """Build the coordinator of `cfg` and load saved parameters, refusing any mismatch."""
        params, meta = load_params(path)
        # Cheap checks first, so a wrong pool fails before the backbone loads.
        svf = cfg.coordinator.get("svf", {}) or {}
        early = {
            "pool_models": [str(n) for n in cfg.pool.models],
            "backbone_id": str(cfg.coordinator.backbone.id),
            "token_position": int(cfg.coordinator.get("token_position", -2)),
            "roles": list(configured_roles(cfg)),
        }
        if not svf.get("enabled", False):
            early["svf_matrices"] = []
        check_metadata(meta, early, path)
        coord = cls.from_config(cfg, backbone=backbone)
        check_metadata(meta, coord.metadata(), path)
        return coord, coord.layout.check(params)
