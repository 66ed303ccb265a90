"""One seed in config; every other seed derives from it by hashing a path of names.

`derive_seed(root, "episode", gen, cand, item, rep)` is stable across processes and machines
(unlike Python's hash()), so a rerun reproduces the same sampling seeds.
"""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(root: int, *path: object) -> int:
    text = "/".join([str(int(root))] + [str(p) for p in path])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def rng(root: int, *path: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(root, *path))
