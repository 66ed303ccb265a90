"""How much of the coordinator's feature depends on the prompt at all.

The head is bias-free and reads one hidden state. When that state is mostly a prompt-independent
vector (SmolLM2-135M at token -2: a shared component of norm ~49 against ~7 rms for what varies between
prompts, cosines 0.95-0.996 across suites), a random candidate's logits move mostly by W @ mean, the
same for every question: routing that cannot tell questions apart. These numbers, computed by the
cache_states stage on the cached first-turn states, say how large that problem is for a backbone and
token position (and whether `coordinator.features.normalize=standardize` is worth trying).

    feature_stats(features, suites) -> {
        count, hidden_size,
        mean_norm               ||mean_i f_i||
        rms_deviation_norm      sqrt(mean_i ||f_i - mean||^2)      (the prompt-dependent part)
        rms_norm                sqrt(mean_i ||f_i||^2)             (= sqrt(mean_norm^2 + rms_deviation_norm^2))
        deviation_to_mean_ratio rms_deviation_norm / mean_norm
        prompt_dependent_share  rms_deviation_norm / rms_norm      (in [0, 1]; 0 = every prompt gives one vector)
        cosine_same_suite       mean cosine between two different items of one suite
        cosine_cross_suite      mean cosine between items of two different suites
        *_pairs, pairs_sampled  how many pairs each mean is over, and whether they were sampled
    }

Cosine means are exact over all pairs while n is small (n <= EXACT_MAX_ITEMS); above that, a seeded
sample of `max_pairs` pairs per kind, drawn uniformly from that kind's pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

EXACT_MAX_ITEMS = 2000   # all pairs from the n x n Gram matrix (32 MB of float64 at this size)
MAX_PAIRS = 20000        # pairs per kind (same suite / cross suite) when sampling


def feature_stats(features: np.ndarray, suites: Sequence[str], *, seed: int = 0,
                  max_pairs: int = MAX_PAIRS, exact_max_items: int = EXACT_MAX_ITEMS) -> dict[str, Any]:
    """The prompt-dependent share and pairwise cosines of `features` (n x d), `suites[i]` naming row i's suite."""
    f = np.asarray(features, dtype=np.float64)
    if f.ndim != 2:
        raise ValueError(f"features must be n x d, got shape {f.shape}")
    suites = [str(s) for s in suites]
    if len(suites) != f.shape[0]:
        raise ValueError(f"{len(suites)} suite names for {f.shape[0]} features")
    n, d = f.shape
    out: dict[str, Any] = {"count": int(n), "hidden_size": int(d)}
    if n == 0:
        return out
    mean = f.mean(axis=0)
    mean_norm = float(np.linalg.norm(mean))
    rms_dev = float(np.sqrt(np.mean(np.sum((f - mean) ** 2, axis=1))))
    rms = float(np.sqrt(np.mean(np.sum(f ** 2, axis=1))))
    out |= {
        "mean_norm": mean_norm,
        "rms_deviation_norm": rms_dev,
        "rms_norm": rms,
        "deviation_to_mean_ratio": rms_dev / mean_norm if mean_norm > 1e-9 * rms else None,  # None: no shared part
        "prompt_dependent_share": rms_dev / rms if rms > 0 else None,
    }
    norms = np.linalg.norm(f, axis=1)
    unit = f / np.where(norms > 0, norms, 1.0)[:, None]
    codes = np.unique(np.array(suites), return_inverse=True)[1]
    if n <= exact_max_items:
        same, cross = _exact_cosines(unit, codes)
        sampled = False
    else:
        same, cross = _sampled_cosines(unit, codes, np.random.default_rng(seed), max_pairs)
        sampled = True
    out |= {
        "cosine_same_suite": float(same.mean()) if same.size else None,
        "cosine_cross_suite": float(cross.mean()) if cross.size else None,
        "same_suite_pairs": int(same.size),
        "cross_suite_pairs": int(cross.size),
        "pairs_sampled": sampled,
    }
    return out


def _exact_cosines(unit: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    gram = unit @ unit.T
    i, j = np.triu_indices(len(unit), k=1)
    same = codes[i] == codes[j]
    return gram[i[same], j[same]], gram[i[~same], j[~same]]


def _sampled_cosines(unit: np.ndarray, codes: np.ndarray, rng: np.random.Generator,
                     max_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform samples of same-suite pairs (suite drawn by its pair count, then two distinct members) and
    of cross-suite pairs (uniform pairs of distinct items, same-suite ones rejected)."""
    members = [np.flatnonzero(codes == c) for c in range(int(codes.max()) + 1)]
    sizes = np.array([len(m) for m in members], dtype=np.float64)
    pair_counts = sizes * (sizes - 1) / 2
    same = np.zeros(0)
    if pair_counts.sum() > 0:
        which = rng.choice(len(members), size=max_pairs, p=pair_counts / pair_counts.sum())
        picks = (rng.random(max_pairs) * sizes[which]).astype(int)
        a = np.array([members[w][k] for w, k in zip(which, picks, strict=True)])
        offset = 1 + (rng.random(max_pairs) * (sizes[which] - 1)).astype(int)  # a different member
        pos = np.array([np.searchsorted(members[w], x) for w, x in zip(which, a, strict=True)])
        b = np.array([members[w][(p + o) % len(members[w])] for w, p, o in zip(which, pos, offset, strict=True)])
        same = np.einsum("ij,ij->i", unit[a], unit[b])
    cross = np.zeros(0)
    if len(members) > 1:
        chosen: list[np.ndarray] = []
        total = 0
        n = len(unit)
        while total < max_pairs:
            a = rng.integers(0, n, size=2 * max_pairs)
            b = rng.integers(0, n, size=2 * max_pairs)
            keep = codes[a] != codes[b]
            chosen.append(np.stack([a[keep], b[keep]], axis=1))
            total += int(keep.sum())
        pairs = np.concatenate(chosen)[:max_pairs]
        cross = np.einsum("ij,ij->i", unit[pairs[:, 0]], unit[pairs[:, 1]])
    return same, cross
