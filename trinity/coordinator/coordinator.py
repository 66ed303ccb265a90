"""The Coordinator facade that evolution, evaluation and serving use.

    coord = Coordinator.from_config(c, pool_models, system_template, cache_dir=...)   # c: the typed section
    # (from a whole config: trinity.assembly.coordinator.coordinator_from_config / load_coordinator)
    coord.num_params, coord.layout, coord.hidden_size
    router = coord.router_for(params)               # one candidate; all routers share one batching service
    coord.save(path, params, extra_meta) ; coord, params = Coordinator.load(path, c, pool_models, ...)
    coord.precompute(transcripts)                   # (n, d) features, e.g. for the cache_states stage
    params = coord.read_params(path)                # a saved coordinator's parameters for this coordinator

Feature normalisation (`coordinator.features.normalize`, feature_norm.py): under `standardize` or `rebalance` every
head this coordinator builds (`head_for`, `router_for`) standardises the raw feature with a FeatureNorm:
- the statistics a parameter vector was saved with, for vectors read by `load` / `read_params` (the
  stored statistics, never a recomputation: evaluation and serving route exactly as training did);
- otherwise the coordinator's own: the loaded ones after `load`, or, when built for training, the
  `fit_norm` the pipeline hands in (`fit_feature_norm` on the training split's cached first-turn states),
  fitted once on first use. Fitting lazily keeps the cache_states stage
  (which builds a coordinator to compute those very states) and evaluation of a saved coordinator free
  of any need for states.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trinity.config_schema.coordinator import CoordinatorConfig
from trinity.contracts import ROLES
from trinity.coordinator.backbone import Backbone, load_backbone
from trinity.coordinator.feature_norm import STATE_IDENTITY, FeatureNorm, FeatureNormError, check_mode
from trinity.coordinator.features.content_cache import FeatureCache
from trinity.coordinator.features.engine import FeatureEngine, FeatureRequest
from trinity.coordinator.features.length_buckets import resolve_max_padding
from trinity.coordinator.features.request_queue import FeatureService
from trinity.coordinator.head import RoutingHead, argmax_tie, check_roles, section_roles
from trinity.coordinator.layout import ParamLayout
from trinity.coordinator.prompt import PromptRenderer
from trinity.coordinator.router import CoordinatorRouter
from trinity.coordinator.saved import check_metadata, load_saved, save_params, saved_feature_norm
from trinity.coordinator.svf import SVFAdapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Route:
    """The first turn's routing decision: the agent and role picked, and the head's probabilities."""

    agent: str
    role: str
    agent_probabilities: dict[str, float]
    role_probabilities: dict[str, float]   # roles the coordinator may not give have probability 0

    @classmethod
    def of(cls, agents: Sequence[str], p_agent: np.ndarray, p_role: np.ndarray, *,
           agent: int | None = None, role: str | None = None) -> Route:
        """From the head's probabilities; the pick is the argmax unless `agent` / `role` name it."""
        agent = argmax_tie(p_agent, None) if agent is None else agent
        role = ROLES[argmax_tie(p_role, None)] if role is None else role
        return cls(str(agents[agent]), role, {str(a): float(p) for a, p in zip(agents, p_agent, strict=True)},
                   {r: float(p) for r, p in zip(ROLES, p_role, strict=True)})

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "role": self.role,
                "probabilities": {"agents": self.agent_probabilities, "roles": self.role_probabilities}}


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
        disk_cache: str | os.PathLike[str] | None = None,
        prefix_tokens: int = 32768,
        max_batch: int = 16,
        max_padding: object = "auto",
        max_wait_s: float = 0.002,
        normalize: str = "none",
        feature_norm: FeatureNorm | None = None,
        fit_norm: Callable[[Coordinator], FeatureNorm] | None = None,
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
        self.normalize = check_mode(normalize)
        if self.normalize == "none" and feature_norm is not None:
            raise ValueError("feature statistics given with normalize='none'")
        if feature_norm is not None and feature_norm.dim != self.hidden_size:
            raise ValueError(f"feature statistics have {feature_norm.dim} dimensions, the backbone {self.hidden_size}")
        self._feature_norm = feature_norm
        self._fit_norm = fit_norm
        self._saved_norms: dict[str, FeatureNorm] = {}  # parameter-vector digest -> statistics it was saved with
        self._norm_lock = threading.Lock()

    @classmethod
    def from_config(cls, c: CoordinatorConfig, pool_models: Sequence[str], system_template: str, *,
                      cache_dir: str | os.PathLike[str], model_cache: str | None = None,
                      backbone: Backbone | None = None,
                      fit_norm: Callable[[Coordinator], FeatureNorm] | None = None) -> Coordinator:
        """The coordinator of the typed `coordinator` section `c`, routing among `pool_models` (the head's agent
        order) with the protocol's coordinator prompt `system_template`; the feature cache's disk file lives
        under `cache_dir` (paths.cache), the backbone's conversion under `model_cache`. Under
        normalize=standardize|rebalance `fit_norm(coordinator)` fits the feature statistics on first use; the
        pipeline hands it in (trinity.pipeline.coordinator_setup, which also reads these from the config)."""
        fc = c.feature_cache
        disk = Path(cache_dir) / "features" / "features.sqlite" if fc.disk else None
        normalize = c.features.normalize.value
        if backbone is None:
            backbone = load_backbone(c.backbone, model_cache)
        return cls(
            backbone,
            [str(name) for name in pool_models],
            str(system_template),
            token_position=c.token_position,
            roles=section_roles(c.roles),
            svf_matrices=list(c.svf.matrices) if c.svf.enabled else (),
            routing=c.routing.value,
            memory_items=fc.memory_items,
            disk_cache=disk,
            prefix_tokens=fc.prefix_tokens,
            max_batch=fc.max_batch,
            max_padding=fc.max_padding,
            max_wait_s=float(fc.max_wait_ms) / 1000.0,
            normalize=normalize,
            fit_norm=fit_norm if normalize != "none" else None,
        )

    # ------------------------------------------------------------------ parameters and routers
    @property
    def num_params(self) -> int:
        return self.layout.size

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    def head_for(self, params: np.ndarray) -> RoutingHead:
        """The routing head of `params`; under normalize=standardize|rebalance it normalises raw features itself.
        A vector with a per-turn prior (trinity.coordinator.layout) gives a head that adds it at every turn."""
        return RoutingHead(self.layout.head_weights(params), len(self.pool_models), self.roles, self.norm_for(params),
                           self.layout.turn_bias(params))

    # ------------------------------------------------------------------ feature normalisation
    @property
    def feature_norm(self) -> FeatureNorm | None:
        """This coordinator's own statistics (None under normalize=none): the loaded ones, or fitted once
        from the training states on first use (a coordinator built for training with a fit_norm)."""
        if self.normalize == "none":
            return None
        with self._norm_lock:
            if self._feature_norm is None:
                if self._fit_norm is None:
                    raise FeatureNormError(f"coordinator.features.normalize={self.normalize} but this coordinator has "
                                           "no feature statistics: build it with "
                                           "trinity.pipeline.coordinator_setup.build_coordinator or load a saved one")
                norm = self._fit_norm(self)
                if norm.dim != self.hidden_size:
                    raise FeatureNormError(f"feature statistics have {norm.dim} dimensions, the "
                                           f"backbone {self.hidden_size}")
                log.info("feature statistics: standardising with mean/std of %d training first-turn states "
                         "(mean norm %.3g, median std %.3g)", norm.count, float(np.linalg.norm(norm.mean)),
                         float(np.median(norm.std)))
                self._feature_norm = norm
            return self._feature_norm

    def norm_for(self, params: np.ndarray) -> FeatureNorm | None:
        """The statistics the head of `params` uses: those it was saved with when it was read from a file,
        else the coordinator's own."""
        if self.normalize == "none":
            return None
        saved = self._saved_norms.get(self._params_key(params)) if self._saved_norms else None
        return saved if saved is not None else self.feature_norm

    def state_identity(self) -> dict[str, Any]:
        """What a cached first-turn state must have been computed with to be this coordinator's feature."""
        meta = self.metadata()
        return {k: meta[k] for k in STATE_IDENTITY}

    def _params_key(self, params: np.ndarray) -> str:
        return hashlib.sha256(self.layout.check(params).tobytes()).hexdigest()

    def router_for(self, params: np.ndarray, mode: str | None = None, *, record: bool = False) -> CoordinatorRouter:
        """A router for one candidate; `record=True` keeps its decisions (build one per episode then)."""
        return CoordinatorRouter(self.head_for(params), self.service, self.layout.svf_deltas(params),
                                 mode or self.routing, record=record)

    def route(self, params: np.ndarray, transcript: str) -> Route:
        """Which agent in which role the head of `params` picks first for `transcript` (the first turn's
        transcript, trinity.episodes.protocol.first_turn_transcript), with the probabilities it gives every
        agent and role: one backbone forward pass, no pool call. The pick is the most probable agent and role
        (argmax routing; the first of exact ties)."""
        feature = self.precompute([transcript], self.layout.svf_deltas(params))[0]
        p_agent, p_role = self.head_for(params).probabilities(feature, turn=0)
        return Route.of(self.pool_models, p_agent, p_role)

    def precompute(self, transcripts: Sequence[str], svf_deltas: np.ndarray | None = None, *,
                   isolated: bool = False) -> np.ndarray:
        """`isolated=True`: bytes independent of what this coordinator computed before (FeatureEngine.features)."""
        if not transcripts:
            return np.zeros((0, self.hidden_size), dtype=np.float32)
        return self.engine.features([FeatureRequest(t, svf_deltas) for t in transcripts], isolated=isolated)

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
            "feature_normalize": self.normalize,
        }

    def save(self, path: str | os.PathLike[str], params: np.ndarray, extra_meta: dict[str, Any] | None = None) -> Path:
        """Save `params` with the metadata; under standardize|rebalance also the statistics its head uses
        (tensors feature_mean / feature_std, their digest in the metadata)."""
        params = self.layout.check(params)
        norm = self.norm_for(params)
        meta = {**(extra_meta or {}), **self.metadata(), **(norm.metadata() if norm is not None else {}),
                "layout": self.layout.describe(params), "turn_prior_turns": self.layout.prior_turns(params)}
        return save_params(path, params, meta, norm.tensors() if norm is not None else None)

    def read_params(self, path: str | os.PathLike[str]) -> np.ndarray:
        """A saved coordinator's parameters, refusing one saved for another pool, backbone, layout or
        normalisation. Under standardize|rebalance its stored statistics are kept for exactly this vector, so
        `head_for` / `router_for` of it route as it was trained, whatever the coordinator's own are."""
        params, meta, tensors = load_saved(path)
        check_metadata(meta, self.metadata(), path)
        params = self.layout.check(params)
        norm = saved_feature_norm(meta, tensors, self.hidden_size, path)
        if norm is not None:
            self._saved_norms[self._params_key(params)] = norm
        return params

    @classmethod
    def load(cls, path: str | os.PathLike[str], c: CoordinatorConfig, pool_models: Sequence[str],
             system_template: str, *,
             cache_dir: str | os.PathLike[str], model_cache: str | None = None,
             backbone: Backbone | None = None) -> tuple[Coordinator, np.ndarray]:
        """Build the coordinator (as from_config) and load saved parameters, refusing any mismatch. Its
        feature statistics (standardize|rebalance) are the stored ones, not fitted from any states."""
        _, meta, _ = load_saved(path)
        # Cheap checks first, so a wrong pool fails before the backbone loads.
        early = {
            "pool_models": [str(n) for n in pool_models],
            "backbone_id": c.backbone.id,
            "token_position": c.token_position,
            "roles": list(section_roles(c.roles)),
            "feature_normalize": c.features.normalize.value,
        }
        if not c.svf.enabled:
            early["svf_matrices"] = []
        check_metadata(meta, early, path)
        coord = cls.from_config(c, pool_models, system_template, cache_dir=cache_dir, model_cache=model_cache,
                                  backbone=backbone)
        coord._fit_norm = None  # a loaded coordinator routes with what it was saved with, never refits
        params = coord.read_params(path)
        coord._feature_norm = coord.norm_for(params) if coord.normalize != "none" else None
        return coord, params

