"""Summary statistics: mean reward with a percentile-bootstrap 95% interval."""

from __future__ import annotations

import numpy as np


def bootstrap_ci(values, *, samples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean. An empty input gives NaNs; one value a zero-width interval."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(samples, x.size))
    means = x[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return mean, float(lo), float(hi)
