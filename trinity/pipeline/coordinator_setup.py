"""The coordinator a stage runs: built from the config, with its feature statistics
(`coordinator.features.normalize=standardize|rebalance`) fitted on the training split's cached first-turn
states. The coordinator never reads the cache_states stage's files itself; this module reads them and
hands the fit in (`Coordinator.from_config(..., fit_norm=...)`). A coordinator built or loaded from a
whole config without statistics is trinity.assembly.coordinator's."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trinity.assembly.coordinator import coordinator_from_config
from trinity.config_schema import TrinityConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.coordinator.backbone import Backbone
from trinity.coordinator.coordinator import Coordinator
from trinity.coordinator.feature_norm import KEY, STATE_IDENTITY, FeatureNorm, FeatureNormError
from trinity.episodes.protocol import first_turn_transcript
from trinity.pipeline.state_files import read_state_cache, state_path
from trinity.tasks.prepare import load_items
from trinity.tasks.types import TaskItem

log = logging.getLogger("trinity.coordinator.feature_norm")


def build_coordinator(cfg: TrinityConfig, backbone: Backbone | None = None) -> Coordinator:
    """The coordinator of `cfg` that fits its feature statistics on cfg's training states on first use."""
    normalize = cfg.coordinator.features.normalize.value
    fit = training_norm_fitter(cfg, keep_shared=normalize == "rebalance", rank=cfg.coordinator.features.rank) \
        if normalize != "none" else None
    return coordinator_from_config(cfg, backbone, fit_norm=fit)


def first_turn_features(coord: Coordinator, items: Sequence[TaskItem], protocol_cfg: ProtocolConfig) -> np.ndarray:
    """First-turn features of task items, exactly as the router reads them at turn 0 (no SVF)."""
    protocol = ProtocolConfig.from_config(protocol_cfg)
    return coord.precompute([first_turn_transcript(protocol, it.prompt) for it in items])


def training_norm_fitter(cfg: TrinityConfig, *, keep_shared: bool = False,
                         rank: int | None = None) -> Callable[[Coordinator], FeatureNorm]:
    """fit_feature_norm on cfg's training states; suites cached for another token position or backbone
    (the last-token ablation) are recomputed with the coordinator itself, as the router would read them."""
    from trinity.pipeline.recorded import recorded_uids

    paths = cfg.paths
    train = list(cfg.tasks.train)
    protocol_cfg = cfg.protocol
    used = recorded_uids(cfg)   # pool=recorded: the run sees only the recording's items (cache_states too)

    def fit(coord: Coordinator) -> FeatureNorm:
        return fit_feature_norm(paths.states, paths.prepared, train, expect=coord.state_identity(),
                                compute=lambda items: first_turn_features(coord, items, protocol_cfg),
                                keep_shared=keep_shared, rank=rank, uids=used)

    return fit


def fit_feature_norm(states_dir: str | Path, prepared_dir: str | Path, train_suites: Sequence[str], *,
                     expect: dict[str, Any] | None = None,
                     compute: Callable[[list], np.ndarray] | None = None, keep_shared: bool = False,
                     rank: int | None = None, uids: Collection[str] | None = None) -> FeatureNorm:
    """Standardisation statistics from the training split's cached first-turn states.

    Reads `<states_dir>/<suite>.safetensors` (+ its JSON index of uids `suite/item_id`) for every
    training suite and keeps the rows whose item is in the prepared `train` split. `expect` (backbone
    id and revision, hidden size, token position) must match the cache's index; a suite cached for
    another setup (e.g. the last-token ablation reads position -1, the cache holds -2) is recomputed
    with `compute(items) -> (n, d) features` when given, and refused otherwise. No cache at all is an
    error that says to run the cache_states stage. `uids`: only these items (the recording's, under
    pool=recorded, where the states cache holds no other). `rank`: project on the top principal directions
    (coordinator.features.rank)."""
    states_dir = Path(states_dir)
    blocks: list[np.ndarray] = []
    for suite in [str(s) for s in train_suites]:
        path = state_path(states_dir, suite)
        position = (expect or {}).get("token_position")
        at_position = state_path(states_dir, suite, position)   # cache_states wrote the ablations' positions
        if position is not None and at_position.is_file() and at_position.with_suffix(".json").is_file():
            path = at_position
        if not path.is_file() or not path.with_suffix(".json").is_file():
            raise FeatureNormError(
                f"{KEY}=standardize|rebalance needs the training split's first-turn states, but {path} does not exist: "
                "run the cache_states stage first (`dvc repro cache_states` or `python -m flows.cache_states`)")
        train = [it for it in load_items(prepared_dir, suite, "train") if uids is None or it.uid in uids]
        cached, features, index = read_state_cache(path)
        expected = expect or {}
        mismatch = [k for k in expected if k in STATE_IDENTITY and index.get(k) != expected[k]]
        if mismatch:
            what = ", ".join(f"{k}: cached {index.get(k)!r}, configured {expected[k]!r}" for k in mismatch)
            if compute is None:
                raise FeatureNormError(f"the states in {path} were computed for another coordinator ({what}); "
                                       "run the cache_states stage with this configuration")
            log.info("feature statistics: %s cached for another setup (%s); computing its %d training features",
                     suite, what, len(train))
            if train:
                blocks.append(np.asarray(compute(train), dtype=np.float64))
            continue
        row = {uid: i for i, uid in enumerate(cached)}
        missing = [it.uid for it in train if it.uid not in row]
        if missing:
            raise FeatureNormError(f"{len(missing)} training items of {suite} (e.g. {missing[0]}) are not in {path}; "
                                   "the states are older than the prepared data: run the cache_states stage again")
        if train:
            blocks.append(np.asarray(features, dtype=np.float64)[[row[it.uid] for it in train]])
    if not blocks:
        raise FeatureNormError(f"{KEY}=standardize: no training items in {list(train_suites)} under {prepared_dir}")
    return FeatureNorm.fit(np.concatenate(blocks), keep_shared=keep_shared, rank=rank)
