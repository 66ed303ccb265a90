"""The evolve stage's evaluation of each generation's candidates: the loop's `Evaluation.population`
(trinity.evolve.evaluators.EvaluatePopulation), one object for every way the pipeline can do it.

- on a recording with exact fitness (SVF off): each candidate's expected reward over every training item, a
  walk of the recorded trees (trinity.pipeline.recorded.ExactEvaluator), no episode;
- on a replayed pool: every candidate's episodes in one batch on this process's rollout loop (a replayed
  episode costs microseconds: a task per candidate would cost more than its episodes);
- on a live pool: one task per candidate through `submit` (inline, Prefect's threads or a Dask cluster),
  `rollout_candidate` with picklable arguments only;
- for an on-policy strategy (`keep_decisions=True`): one batch in this process, routing decisions recorded
  (it learns from sampled episodes, so exact fitness does not apply).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from trinity.config import Config, from_yaml, to_yaml, typed
from trinity.config_schema import TrinityConfig
from trinity.episodes.trace import Trace
from trinity.evolve.evaluators import PopulationResult
from trinity.pipeline import items as item_sel
from trinity.pipeline.rollouts import RolloutContext, config_key
from trinity.tasks.types import TaskItem

# submit(fn, *args) -> an object with .result(); the default runs inline.
Submit = Callable[..., Any]


class _Done:
    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self) -> Any:
        return self._value


def inline_submit(fn, *args, **kwargs):
    return _Done(fn(*args, **kwargs))


def rollout_candidate(cfg_yaml: str, generation: int, candidate: int, params: list[float],
                      item_uids: list[str], repeats: int) -> list[Trace]:
    """One candidate's episodes; picklable arguments only, so it also runs on a Dask worker."""
    cfg, key, by_uid = _candidate_setup(cfg_yaml)
    ctx = RolloutContext.get(cfg, key=key)
    chosen = [by_uid[u] for u in item_uids]
    return ctx.run_candidate(np.asarray(params), chosen, generation=generation, candidate=candidate, repeats=repeats)


_SETUPS: dict[str, tuple] = {}


def _candidate_setup(cfg_yaml: str) -> tuple[TrinityConfig, str, dict[str, TaskItem]]:
    """The parsed config, its key and the training items by uid, once per process and config instead of
    once per candidate (both cost more than a candidate's episodes on the simulated pool: ~0.17 s each,
    measured). Re-read when the prepared files change."""
    cached = _SETUPS.get(cfg_yaml)
    cfg = cached[0] if cached else from_yaml(cfg_yaml)
    folder = Path(cfg.paths.prepared)
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.parquet")))
    if cached is None or cached[3] != stamp:
        items = item_sel.load_split(cfg, list(cfg.tasks.train), "train") + item_sel.load_split(
            cfg, list(cfg.tasks.train), "validation")
        if len(_SETUPS) >= 4:
            _SETUPS.pop(next(iter(_SETUPS)))
        cached = _SETUPS[cfg_yaml] = (cfg, config_key(cfg), {it.uid: it for it in items}, stamp)
    return cached[0], cached[1], cached[2]


class PopulationEvaluator:
    """`evaluate_population(generation, candidates, keep_decisions=False)` of the evolve stage on `ctx`'s pool
    over the training items `train` (module doc: which path a call takes). `counted(label, total)` is the
    progress context the episodes are counted in."""

    def __init__(self, cfg: Config, ctx: Any, train: list[TaskItem], *, exact: Any = None,
                 submit: Submit = inline_submit, counted: Callable[[str, int], AbstractContextManager[Any]]) -> None:
        self.cfg, self.ctx, self.train, self.exact = typed(cfg), ctx, list(train), exact
        self.submit, self.counted = submit, counted
        self.repeats = self.cfg.evolve.repeats
        self.cfg_yaml = to_yaml(cfg)

    def __call__(self, generation: int, candidates: list[np.ndarray], /, *,
                 keep_decisions: bool = False) -> PopulationResult:
        if self.exact is not None and not keep_decisions:
            return PopulationResult.of_exact(self.exact.population(candidates, self.train))
        ctx, repeats = self.ctx, self.repeats
        chosen = item_sel.generation_items(self.cfg, self.train, generation)
        total = len(candidates) * len(chosen) * repeats
        with self.counted(f"generation {generation}: episodes", total) as bar:
            if keep_decisions:
                traces, decisions = ctx.run_recorded(candidates, chosen, generation=generation, repeats=repeats)
                return PopulationResult(traces, decisions=decisions)
            if getattr(ctx.pool, "replay", None) is not None:
                chunks = [(ctx.specs_for(ctx.router_for(np.asarray(x)), chosen, generation=generation, candidate=c,
                                         repeats=repeats), self.cfg.protocol) for c, x in enumerate(candidates)]
                return PopulationResult(ctx.run_chunks(chunks))
            uids = [it.uid for it in chosen]
            futures = [self.submit(rollout_candidate, self.cfg_yaml, generation, c, np.asarray(x).tolist(), uids,
                                   repeats) for c, x in enumerate(candidates)]
            results: list[list[Trace]] = []
            finished = 0
            for f in futures:
                results.append(f.result())
                finished += len(results[-1])
                bar.at_least(finished)   # episodes on Dask workers count when their candidate's result arrives
            return PopulationResult(results)
