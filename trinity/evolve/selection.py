"""Which validated mean the evolution keeps (`evolve.validation.select`): a rule over every validation so far.

Each validation of the distribution mean (x0 first, as generation -1) gives a mean reward over the validation
items and, where the caller can tell them apart, the reward of every item (an exact expectation per item on a
recording; the item's episode reward on a live pool). The same items are validated every time, so two
validations can be compared item by item: the paired differences d_i = r_i(a) - r_i(b) take out how hard
each item is, and their standard error se(d) = sd(d) / sqrt(n) is the noise of "a beats b" on these items.

Keeping the strict maximum of a dozen validations (`max`) keeps the luckiest one: with 30 items each
validation's error is a few points, as large as the gains, so the maximum over many is biased upward (the
winner's curse) and often a later, more fitted mean that scores no better on new items. The two other rules
ask for an improvement beyond that noise, `margin` standard errors of the paired differences:
- `paired_gain`: walking the validations in order, a mean replaces the kept one only when its paired mean
  gain over the kept one exceeds margin x se. One lucky validation no longer wins by a hair; a real
  improvement still does, and the kept mean never goes back.
- `one_se`: Breiman's one-standard-error rule with paired errors: the best validation b, then the EARLIEST
  validation e whose reward is within margin x se(d_b - d_e) of b's. Earlier means sit closer to x0 (the
  search moves away from uniform routing generation by generation), so among the means the items cannot tell
  apart this keeps the least fitted; x0 itself when nothing beats it beyond noise.
Without per-item rewards (a checkpoint from before they were kept) both compare mean rewards only, like `max`.

The choice never feeds back into the search: the strategy's trajectory is the same under every rule, only
which of its validated means is saved differs (which is how benchmarks/recorded_ablations.py compares them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from trinity.errors import ConfigError


@dataclass(frozen=True)
class Validated:
    """One validation of the mean, as the rules see it."""

    generation: int                  # -1: x0
    reward: float                    # mean over the validation items, routed as coordinator.routing
    per_item: np.ndarray | None      # the same items in the same order at every validation; None: unknown


def paired_se(a: Validated, b: Validated) -> float | None:
    """Standard error of the mean paired difference a - b over the validation items; None without per-item
    rewards for both (or for fewer than two items, where no spread can be measured)."""
    if a.per_item is None or b.per_item is None or len(a.per_item) != len(b.per_item) or len(a.per_item) < 2:
        return None
    d = np.asarray(a.per_item, dtype=np.float64) - np.asarray(b.per_item, dtype=np.float64)
    return float(np.std(d, ddof=1) / math.sqrt(len(d)))


def _beyond_noise(new: Validated, kept: Validated, margin: float) -> bool:
    """new's mean reward exceeds kept's by more than margin paired standard errors (strictly more: a tie,
    or a gain with no spread at margin 0, is no improvement)."""
    gain = new.reward - kept.reward
    se = paired_se(new, kept)
    return gain > (0.0 if se is None else margin * se)


def select_max(history: Sequence[Validated], margin: float) -> int:
    """The strictly highest mean reward; ties keep the earlier (the loop's behaviour before these rules)."""
    best = 0
    for i in range(1, len(history)):
        if history[i].reward > history[best].reward:
            best = i
    return best


def select_paired_gain(history: Sequence[Validated], margin: float) -> int:
    kept = 0
    for i in range(1, len(history)):
        if _beyond_noise(history[i], history[kept], margin):
            kept = i
    return kept


def select_one_se(history: Sequence[Validated], margin: float) -> int:
    best = select_max(history, margin)
    for i in range(best):
        se = paired_se(history[best], history[i])
        if se is not None and history[best].reward - history[i].reward <= margin * se:
            return i
    return best


Rule = Callable[[Sequence[Validated], float], int]

RULES: dict[str, Rule] = {
    "max": select_max,
    "paired_gain": select_paired_gain,
    "one_se": select_one_se,
}


def select(rule: str, history: Sequence[Validated], margin: float) -> int:
    """The index in `history` (x0 first, then every validation in order) of the mean to keep."""
    if not history:
        raise ValueError("no validation to select from")
    try:
        chooser = RULES[rule]
    except KeyError:
        raise ConfigError(f"config key 'evolve.validation.select': unknown rule {rule!r}; "
                          f"known: {sorted(RULES)}") from None
    return chooser(history, margin)


def select_not_below(rule: str, history: Sequence[Validated], margin: float) -> int:
    """`select` over candidates ordered simplest first, never ending below the first (trinity.pipeline.constant_policy:
    a constant policy first): the rule's choice, unless its reward is below history[0]'s, then history[0]. `max` and
    `paired_gain` never pick below history[0]; `one_se` could (its earliest mean within margin standard errors of the
    best may sit under a first candidate whose paired error with the best is smaller)."""
    kept = select(rule, history, margin)
    return kept if history[kept].reward >= history[0].reward else 0
