"""Typed configs for tests that name only the keys they are about: `typed_config({...})` is the composed
`experiment=local_live` config with those keys set (a given `pool.models` replaces the composed pool's models,
so the head order is the test's), typed as `trinity.config.load` returns it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from trinity import config
from trinity.config_schema import TrinityConfig

BASE = ["experiment=local_live"]


def typed_config(values: Mapping[str, Any], overrides: tuple[str, ...] = ()) -> TrinityConfig:
    doc = config.compose([*BASE, *overrides], validate_cfg=False)
    OmegaConf.set_struct(doc, False)
    values = copy.deepcopy(dict(values))
    models = (values.get("pool") or {}).pop("models", None)
    if models is not None:
        doc.pool.models = models
    return config.typed(OmegaConf.merge(doc, values))
