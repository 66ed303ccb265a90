"""Summary statistics and the paired tests the report's verdicts come from.

Intervals: a Wilson score interval for 0/1 rewards (it stays inside [0, 1] and keeps its coverage at
the small n and extreme rates an evaluation has, where the percentile bootstrap collapses to a zero
width at 0/n or n/n), the percentile bootstrap otherwise (graded rewards in between).

Wins and losses: two methods ran on the same items, so their rewards are paired and the question is
whether the per-item differences are centred on zero. Exact McNemar on the discordant pairs for 0/1
rewards, a sign-flip permutation test of the mean difference otherwise. Comparing two separate
intervals instead throws the pairing away (and overlap is not a test at any stated level).
Everything here is numpy and the standard library: scipy is not a dependency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

ALPHA = 0.05          # the report's significance level for a win or a loss
EXACT_SIGN_FLIPS = 12  # up to this many paired items the permutation test enumerates all 2^n sign flips
_TOL = 1e-12          # rewards are in [0, 1]: differences closer than this are the same value


def bootstrap_ci(values: Iterable[float], *, samples: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean. An empty input gives NaNs; one value a zero-width
    interval."""
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


def is_binary(values: Iterable[float]) -> bool:
    """All rewards are exactly 0 or 1 (an empty input is not: there is nothing to count)."""
    x = np.asarray(list(values), dtype=float)
    return x.size > 0 and bool(np.all((x == 0.0) | (x == 1.0)))


def wilson_ci(successes: int, n: int, *, level: float = 0.95) -> tuple[float, float, float]:
    """(rate, low, high): the Wilson score interval for `successes` out of `n`; NaNs when n is 0.
    Unlike the normal approximation it never leaves [0, 1] and is not zero-width at 0/n or n/n."""
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    return p, max(0.0, centre - half), min(1.0, centre + half)


def interval(values: Iterable[float], *, samples: int = 2000, level: float = 0.95,
             seed: int = 0) -> tuple[float, float, float, str]:
    """(mean, low, high, method): Wilson for 0/1 rewards, the percentile bootstrap otherwise;
    `method` (wilson | bootstrap) goes into the summary table so a reader knows which one it is."""
    x = [float(v) for v in values]
    if is_binary(x):
        return (*wilson_ci(int(sum(x)), len(x), level=level), "wilson")
    return (*bootstrap_ci(x, samples=samples, level=level, seed=seed), "bootstrap")


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: under no difference each of the b + c discordant pairs is
    equally likely to go either way, so min(b, c) is Binomial(b + c, 1/2). No discordant pair: p = 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail, term = 0, 1   # term = comb(n, k), each from the one before: exact integers, no comb() per k
    for k in range(min(b, c) + 1):
        tail += term
        term = term * (n - k) // (k + 1)
    # integer true division is correctly rounded for any size; 2.0 ** n overflowed past n = 1024
    return min(1.0, (2 * tail) / (1 << n))


def sign_flip_test(differences: Iterable[float], *, samples: int = 2000, seed: int = 0) -> float:
    """Two-sided permutation p-value for a zero mean of paired differences: under no difference each
    difference is as likely to have the other sign. Exact (all 2^n flips) for n <= EXACT_SIGN_FLIPS,
    else `samples` random flips with the (1 + hits) / (1 + samples) estimate, which is never 0.
    Used for graded rewards, where McNemar's 0/1 counting does not apply."""
    d = np.asarray(list(differences), dtype=float)
    if d.size == 0:
        return float("nan")
    observed = abs(float(d.mean()))
    if observed <= _TOL:
        return 1.0
    if d.size <= EXACT_SIGN_FLIPS:
        bits = (np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1
        flipped = np.abs(((2 * bits - 1) * d).mean(axis=1))
        return float(np.mean(flipped >= observed - _TOL))
    rng = np.random.default_rng(seed)
    hits, left = 0, samples
    while left > 0:   # in batches, so many items x many samples stays small in memory
        k = min(left, 256)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(k, d.size))
        hits += int(np.sum(np.abs((signs * d).mean(axis=1)) >= observed - _TOL))
        left -= k
    return (1.0 + hits) / (1.0 + samples)


@dataclass(frozen=True)
class PairedTest:
    """One paired comparison of method A (e.g. trinity) against method B on the same items."""
    n: int                 # paired items (same suite, item and repeat)
    mean_a: float
    mean_b: float
    test: str              # mcnemar | sign_flip
    p_value: float
    b: int | None = None   # McNemar: A right and B wrong
    c: int | None = None   # McNemar: A wrong and B right

    @property
    def difference(self) -> float:
        return self.mean_a - self.mean_b


def paired_test(a: Iterable[float], b: Iterable[float], *, samples: int = 2000, seed: int = 0) -> PairedTest:
    """Exact McNemar when both sides are 0/1 rewards, else the sign-flip test of the mean difference.
    `a` and `b` are aligned: position i is the same item (and repeat) for both."""
    x = np.asarray(list(a), dtype=float)
    y = np.asarray(list(b), dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired rewards must be aligned, got {x.size} and {y.size}")
    if x.size == 0:
        return PairedTest(0, float("nan"), float("nan"), "none", float("nan"))
    if is_binary(x) and is_binary(y):
        right_wrong = int(np.sum((x == 1.0) & (y == 0.0)))
        wrong_right = int(np.sum((x == 0.0) & (y == 1.0)))
        return PairedTest(int(x.size), float(x.mean()), float(y.mean()), "mcnemar",
                          mcnemar_exact(right_wrong, wrong_right), right_wrong, wrong_right)
    return PairedTest(int(x.size), float(x.mean()), float(y.mean()), "sign_flip",
                      sign_flip_test(x - y, samples=samples, seed=seed))


def too_few(n: int, min_items: int) -> str:
    return f"too few items (n={n}, need {min_items})"


def verdict(test: PairedTest, *, alpha: float = ALPHA, min_items: int = 20) -> str:
    """win | loss | no significant difference | too few items (n=..., need ...): a win or a loss only
    when the paired test rejects "no difference" at `alpha`, and no verdict at all below `min_items`
    paired items, where even a large observed difference says little."""
    if test.n < min_items:
        return too_few(test.n, min_items)
    if test.p_value < alpha and test.difference > 0:
        return "win"
    if test.p_value < alpha and test.difference < 0:
        return "loss"
    return "no significant difference"
