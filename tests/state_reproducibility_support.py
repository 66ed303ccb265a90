"""What tests/unit/test_state_reproducibility.py and tests/integration/test_state_reproducibility_load.py share (no
tests here): items of random words and a coordinator on the tiny backbone."""

from __future__ import annotations

import numpy as np
from coordinator_support import tiny_backbone

from trinity import config
from trinity.assembly.coordinator import coordinator_from_config
from trinity.coordinator.coordinator import Coordinator

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "carry", "the", "tens"]


def _items(n: int = 150) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    return [(f"u{i}", "Task: " + " ".join(rng.choice(WORDS, int(rng.integers(3, 90))))) for i in range(n)]


def _coordinator(tmp_path, name: str) -> Coordinator:
    cfg = config.load(None, ["experiment=local_live", f"paths.cache={tmp_path / name}",
                             "coordinator.features.normalize=none"])
    return coordinator_from_config(cfg, backbone=tiny_backbone())

