"""Which task items each part of the pipeline sees, chosen reproducibly from the root seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trinity.config_schema import TrinityConfig
from trinity.config_schema.choices import TrainItems
from trinity.seeding import rng
from trinity.tasks.types import TaskItem


def load_split(cfg: TrinityConfig, suites: Sequence[str], split: str) -> list[TaskItem]:
    """The prepared items of `suites` in `split`; under pool=recorded only the recording's items (a
    recording holds every call of its own items and no other)."""
    from trinity.pipeline.recorded import recorded_uids
    from trinity.tasks.prepare import load_items

    keep = recorded_uids(cfg)
    out: list[TaskItem] = []
    for suite in suites:
        out.extend(it for it in load_items(Path(cfg.paths.prepared), suite, split) if keep is None or it.uid in keep)
    return out


def sample(items: Sequence[TaskItem], n: int | None, seed: int, *names: object) -> list[TaskItem]:
    """A seeded sample without replacement (all items, shuffled, when n is None or >= len)."""
    items = list(items)
    order = rng(seed, "sample", *names).permutation(len(items))
    chosen = [items[i] for i in order]
    return chosen if n is None else chosen[: int(n)]


def balanced_sample(items: Sequence[TaskItem], n: int, seed: int, *names: object) -> list[TaskItem]:
    """A seeded sample of n items spread evenly over suites (round-robin), so a small per-generation
    batch still covers the whole training mixture."""
    by_suite: dict[str, list[TaskItem]] = {}
    for it in items:
        by_suite.setdefault(it.suite, []).append(it)
    queues = {s: sample(v, None, seed, *names, s) for s, v in sorted(by_suite.items())}
    order = sample([TaskItem(s, s, "", None) for s in queues], None, seed, *names, "suite-order")
    out: list[TaskItem] = []
    while len(out) < n and any(queues.values()):
        for s in (o.suite for o in order):
            if queues[s] and len(out) < n:
                out.append(queues[s].pop(0))
    return out


def balanced_counts(n: int | None, available: Mapping[str, int]) -> dict[str, int]:
    """How many items a balanced (round-robin) sample of n takes from each suite, n None = all: the counts of
    `balanced_sample` before its seeded suite order decides which suites take the items that do not divide
    evenly (here the first in name order), for `trinity plan`, which knows counts and not items."""
    out = dict.fromkeys(available, 0)
    left = sum(available.values()) if n is None else int(n)
    active = sorted(s for s, k in available.items() if k > 0)
    while left > 0 and active:
        share, extra = divmod(left, len(active))
        for i, s in enumerate(active):
            take = min(available[s] - out[s], share + (1 if i < extra else 0))
            out[s] += take
            left -= take
        active = [s for s in active if out[s] < available[s]]
    return out


def eval_suites(cfg: TrinityConfig) -> list[str]:
    """The suites evaluation tests on: `eval.suites`, else every training and transfer suite."""
    suites = cfg.eval.suites
    return [str(s) for s in suites] if suites else list(cfg.tasks.train) + list(cfg.tasks.transfer)


TRAIN_ITEMS_MODES = tuple(m.value for m in TrainItems)


def train_items_mode(cfg: TrinityConfig) -> str:
    """`evolve.train_items` (absent: the schema's default); anything else is a ConfigError naming the key."""
    return cfg.evolve.train_items.value


def generation_items(cfg: TrinityConfig, train_items: Sequence[TaskItem], generation: int) -> list[TaskItem]:
    """Every candidate of a generation sees these items (common random numbers). `evolve.train_items`:
    `resample` draws a new balanced sample each generation; `fixed` uses generation 0's sample in every
    generation, so calls an earlier generation made (same item, repeat and turn, hence the same pool
    sample index) are response-cache hits later."""
    drawn = 0 if train_items_mode(cfg) == "fixed" else generation
    return balanced_sample(train_items, cfg.evolve.episodes_per_candidate, cfg.seed, "generation", drawn)


def validation_items(cfg: TrinityConfig) -> list[TaskItem]:
    items = load_split(cfg, list(cfg.tasks.train), "validation")
    return balanced_sample(items, cfg.evolve.validation.n_items, cfg.seed, "validation")
