"""The coordinator of a whole config: built (`coordinator_from_config`) or loaded from a saved file and
checked against the config (`load_coordinator`). The coordinator itself sees only its typed section; this
module hands it the pool's models in head order, the protocol's coordinator prompt and the paths. Feature
statistics fitted on a run's cached states are the pipeline's (trinity.pipeline.coordinator_setup)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from trinity.config_schema import TrinityConfig
from trinity.coordinator.backbone import Backbone
from trinity.coordinator.coordinator import Coordinator
from trinity.coordinator.feature_norm import FeatureNorm


def coordinator_from_config(cfg: TrinityConfig, backbone: Backbone | None = None, *,
                            fit_norm: Callable[[Coordinator], FeatureNorm] | None = None) -> Coordinator:
    """The coordinator of a whole config (its typed `coordinator` section, the pool's models in head order, the
    protocol's coordinator prompt, paths.cache and paths.model_cache), with no feature statistics fitted
    unless `fit_norm` is given (build_coordinator fits them on the training states)."""
    paths = cfg.paths
    return Coordinator.from_config(cfg.coordinator, list(cfg.pool.models), cfg.protocol.coordinator_system,
                                   cache_dir=paths.cache,
                                     model_cache=paths.model_cache, backbone=backbone, fit_norm=fit_norm)


def load_coordinator(path: str | Path, cfg: TrinityConfig,
                     backbone: Backbone | None = None) -> tuple[Coordinator, np.ndarray]:
    """`Coordinator.load` with the config's sections: the saved coordinator at `path` and its parameters,
    refused when it does not fit this config (pool, backbone, token position, roles, normalisation)."""
    paths = cfg.paths
    return Coordinator.load(path, cfg.coordinator, list(cfg.pool.models), cfg.protocol.coordinator_system,
                            cache_dir=paths.cache,
                            model_cache=paths.model_cache, backbone=backbone)
