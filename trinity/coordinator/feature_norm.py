"""Optional per-dimension standardisation of the coordinator's feature before the routing head.

`coordinator.features.normalize`:
- `none` (the paper): the head reads the raw hidden state.
- `standardize`: the head reads (f - mu) / sd, with mu and sd per dimension from the TRAINING split's
  cached first-turn states (the cache_states stage's `data/states`).
- `rebalance`: standardize, then add back the shared direction mu / |mu| scaled to the rms norm of the
  standardised features: the prompt-independent part and the part that varies with the prompt get the
  same norm. Why not plain `standardize`: with a bias-free head the shared part is the head's only way to
  prefer a role or a model for EVERY question (e.g. "never open with a Verifier"); centring removes it,
  and the routing benchmark measured standardize below `none` for that reason (README, "The routing
  benchmark").

Why: the raw feature is dominated by a prompt-independent vector (feature_stats.py), so with the
bias-free head a candidate's logits move mostly by W @ mean, identically for every question, and
sep-CMA-ES spends its steps on that instead of on what tells questions apart. Subtracting mu removes
the shared part; dividing by sd puts every dimension on one scale, so sigma0 means the same thing in
every direction. The head stays bias-free and linear in W, so x0 = 0 is still uniform routing and the
parameter layout does not change.

The statistics are a fixed part of a trained coordinator: `Coordinator.save` stores them next to the
parameters (tensors `feature_mean`, `feature_std`, digest in the metadata) and loading uses the stored
ones, never a recomputation, so a served coordinator routes exactly as it was trained.

sd has a floor (FLOOR_FRACTION x the median sd, at least ABS_FLOOR) so a (nearly) constant dimension
is centred but not blown up into noise of unit variance.

`coordinator.features.rank` (a capacity control, issue 40; null = off, the paper): keep only the top `rank`
principal directions of the standardised training features (an orthonormal `basis`, rank x d, from their SVD)
and project every standardised feature onto them before the shared direction is added back (at the norm
it has without a rank: the projection removes directions and rescales nothing). The head keeps
its layout (d inputs), but what varies with the prompt reaches it through `rank` directions only: with
`rank: 0` under `rebalance` the head reads the shared direction alone, the same for every transcript, so it
can only learn a prompt-independent policy. A rank is chosen on the validation items
(benchmarks/recorded_ablations.py), like any capacity control.

The cached states are first-turn features of the plain backbone. With SVF on, the statistics are still
those of the unadapted backbone (the x0 = 0 point): a fixed affine map in front of the head, which the
SVF offsets then adapt around. Later turns' features (longer transcripts) are not in the statistics;
they go through the same fixed map.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trinity.config_schema.choices import FeatureNormalize
from trinity.errors import ConfigError, TrinityError

MODES = tuple(m.value for m in FeatureNormalize)
KEY = "coordinator.features.normalize"
RANK_KEY = "coordinator.features.rank"
FLOOR_FRACTION = 1e-2
ABS_FLOOR = 1e-6
# State-cache identity that must match the coordinator for its features to be usable (as preload_state_cache).
STATE_IDENTITY = ("backbone_id", "backbone_revision", "hidden_size", "token_position")


class FeatureNormError(TrinityError):
    """Feature statistics cannot be computed (no cached states, no training items)."""


def check_mode(value: Any) -> str:
    """The normalisation mode, or a ConfigError naming `coordinator.features.normalize`."""
    mode = "none" if value is None else value
    if not isinstance(mode, str) or mode not in MODES:
        raise ConfigError(f"config key '{KEY}' must be one of {'|'.join(MODES)}, got {value!r}")
    return mode


@dataclass(frozen=True, eq=False)
class FeatureNorm:
    """Per-dimension mean and (floored) standard deviation; `apply(f) = (f - mean) / std`, plus
    `shared_norm * mean / |mean|` when shared_norm > 0 (mode `rebalance`)."""

    mean: np.ndarray
    std: np.ndarray
    count: int = 0                      # items the statistics came from (provenance only)
    shared_norm: float = 0.0            # norm of the shared direction added back (0: plain standardize)
    basis: np.ndarray | None = None     # rank x d orthonormal rows: the standardised feature is projected on them
    _digest: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float64).ravel()
        std = np.asarray(self.std, dtype=np.float64).ravel()
        if mean.shape != std.shape or mean.size == 0:
            raise ValueError(f"feature mean and std must be vectors of one length, got {mean.shape} and {std.shape}")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)):
            raise ValueError("feature mean must be finite and std finite and > 0")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        if not (np.isfinite(self.shared_norm) and self.shared_norm >= 0):
            raise ValueError(f"shared_norm must be finite and >= 0, got {self.shared_norm}")
        if self.basis is not None:
            basis = np.asarray(self.basis, dtype=np.float64)
            if basis.ndim != 2 or basis.shape[1] != mean.size or basis.shape[0] > mean.size:
                raise ValueError(f"feature basis must be rank x {mean.size} with rank <= {mean.size}, "
                                 f"got {basis.shape}")
            if not np.all(np.isfinite(basis)) or not np.allclose(basis @ basis.T, np.eye(basis.shape[0]), atol=1e-6):
                raise ValueError("feature basis rows must be finite and orthonormal")
            object.__setattr__(self, "basis", basis)
        h = hashlib.sha256(mean.tobytes())
        h.update(std.tobytes())
        if self.shared_norm:
            h.update(np.float64(self.shared_norm).tobytes())
        if self.basis is not None:
            h.update(np.int64(self.basis.shape[0]).tobytes())
            h.update(self.basis.tobytes())
        object.__setattr__(self, "_digest", h.hexdigest())

    @property
    def dim(self) -> int:
        return int(self.mean.size)

    @property
    def rank(self) -> int | None:
        """How many principal directions of the prompt-dependent part the head reads (None: all)."""
        return None if self.basis is None else int(self.basis.shape[0])

    @property
    def digest(self) -> str:
        """sha256 of the float64 mean and std bytes, then the shared norm (when non-zero) and the basis (rank and
        bytes, when there is one): names the statistics in saved metadata."""
        return self._digest

    def apply(self, feature: np.ndarray) -> np.ndarray:
        """(f - mean) / std for one feature (d,) or a batch (n, d), in float64."""
        out: np.ndarray = (np.asarray(feature, dtype=np.float64) - self.mean) / self.std
        if self.basis is not None:
            out = (out @ self.basis.T) @ self.basis
        if self.shared_norm:
            norm = float(np.linalg.norm(self.mean))
            if norm > 0:
                out = out + (self.shared_norm / norm) * self.mean
        return out

    @classmethod
    def fit(cls, features: np.ndarray, *, keep_shared: bool = False, rank: int | None = None) -> FeatureNorm:
        """Statistics of `features` (n x d, n >= 2): mean and population std with the floor; with `rank` the
        top `rank` principal directions of the standardised features (an error when the features span fewer:
        they cannot name more); with `keep_shared` the shared direction comes back at the rms norm of the
        standardised features (before any projection: a rank removes directions and rescales nothing)."""
        f = np.asarray(features, dtype=np.float64)
        if f.ndim != 2 or f.shape[0] < 2:
            raise FeatureNormError(f"feature standardisation needs at least 2 features, got shape {f.shape}")
        mean = f.mean(axis=0)
        std = f.std(axis=0)
        floor = max(ABS_FLOOR, FLOOR_FRACTION * float(np.median(std)))
        std = np.maximum(std, floor)
        z = (f - mean) / std
        basis = principal_directions(z, int(rank)) if rank is not None else None
        shared = float(np.sqrt(np.mean(np.sum(z ** 2, axis=1)))) if keep_shared else 0.0
        return cls(mean, std, count=int(f.shape[0]), shared_norm=shared, basis=basis)

    # -- storage in a saved coordinator ------------------------------------------------------
    def tensors(self) -> dict[str, np.ndarray]:
        out = {"feature_mean": self.mean, "feature_std": self.std}
        if self.basis is not None:
            out["feature_basis"] = self.basis
        return out

    def metadata(self) -> dict[str, Any]:
        return {"feature_norm_sha256": self.digest, "feature_norm_items": self.count,
                "feature_norm_shared": self.shared_norm, "feature_norm_rank": self.rank}


def principal_directions(z: np.ndarray, rank: int) -> np.ndarray:
    """The top `rank` right singular vectors of the centred rows `z` (rank x d, orthonormal; signs fixed so
    each vector's largest entry is positive, which makes the basis a function of the data alone)."""
    if rank < 0:
        raise FeatureNormError(f"{RANK_KEY} must be >= 0, got {rank}")
    _, s, vt = np.linalg.svd(z, full_matrices=False)
    spanned = int(np.sum(s > 1e-9 * max(float(s[0]) if s.size else 0.0, 1e-300)))
    if rank > spanned:
        raise FeatureNormError(f"{RANK_KEY}={rank} but the {z.shape[0]} training features span only {spanned} "
                               f"directions: choose a rank <= {spanned} (or null for no projection)")
    basis = vt[:rank]
    signs = np.sign(basis[np.arange(rank), np.argmax(np.abs(basis), axis=1)]) if rank else np.zeros(0)
    return basis * signs[:, None] if rank else np.zeros((0, z.shape[1]))

