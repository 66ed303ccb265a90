"""The evolve stage's evaluation of each generation's candidates: the loop's `Evaluation.population`
(trinity.evolve.evaluators.EvaluatePopulation), one object for every way the pipeline can do it.

- on a recording with exact fitness (SVF off): each candidate's expected reward over every training item, a
  walk of the recorded trees (trinity.pipeline.recorded.ExactEvaluator), no episode;
- on a replayed pool: every candidate's episodes in one batch on this process's rollout loop (a replayed
  episode costs microseconds: a task per candidate would cost more than its episodes);
- on a live pool: one task per candidate through `submit` (inline, Prefect's threads or a Dask cluster),
  `rollout_candidate` on the stage's runtime (on a Dask worker, the worker's own: trinity.pipeline.stage_runtime);
- for an on-policy strategy (`keep_decisions=True`): one batch in this process, routing decisions recorded
  (it learns from sampled episodes, so exact fitness does not apply).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.episodes.trace import Trace
from trinity.evolve.evaluators import PopulationResult
from trinity.pipeline import items as item_sel
from trinity.pipeline.stage_runtime import RuntimeDescription, TaskRuntime
from trinity.tasks.types import TaskItem

if TYPE_CHECKING:
    from trinity.pipeline.recorded import ExactEvaluator

# submit(fn, *args) -> an object with .result(); the default runs inline.
Submit = Callable[..., Any]


class _Done:
    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self) -> Any:
        return self._value


def inline_submit(fn, *args, **kwargs):
    return _Done(fn(*args, **kwargs))


def rollout_candidate(runtime: TaskRuntime, generation: int, candidate: int, params: list[float],
                      item_uids: list[str], repeats: int) -> list[Trace]:
    """One candidate's episodes on `runtime` (the stage's, or a Dask worker's own: TaskRuntime); the other
    arguments are plain data (ids and numbers), so it also runs on a Dask worker."""
    by_uid = runtime.items()
    chosen = [by_uid[u] for u in item_uids]
    return runtime.runtime().run_candidate(np.asarray(params), chosen, generation=generation, candidate=candidate,
                                           repeats=repeats)


class PopulationEvaluator:
    """`evaluate_population(generation, candidates, keep_decisions=False)` of the evolve stage on the stage's
    runtime `ctx` over the training items `train` (module doc: which path a call takes). `counted(label, total)`
    is the progress context the episodes are counted in."""

    def __init__(self, cfg: TrinityConfig, ctx: StageRuntime, train: list[TaskItem], *,
                 exact: ExactEvaluator | None = None, submit: Submit = inline_submit,
                 counted: Callable[[str, int], AbstractContextManager[Any]]) -> None:
        self.cfg, self.ctx, self.train, self.exact = cfg, ctx, list(train), exact
        self.submit, self.counted = submit, counted
        self.repeats = self.cfg.evolve.repeats
        # what each candidate's task runs on: this runtime and these items here, a worker's own on Dask
        self.task_runtime = TaskRuntime(RuntimeDescription.of(ctx), ctx, {it.uid: it for it in self.train})

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
            if ctx.replayed:
                chunks = [(ctx.specs_for(ctx.router_for(np.asarray(x)), chosen, generation=generation, candidate=c,
                                         repeats=repeats), self.cfg.protocol) for c, x in enumerate(candidates)]
                return PopulationResult(ctx.run_chunks(chunks))
            uids = [it.uid for it in chosen]
            futures = [self.submit(rollout_candidate, self.task_runtime, generation, c, np.asarray(x).tolist(), uids,
                                   repeats) for c, x in enumerate(candidates)]
            results: list[list[Trace]] = []
            finished = 0
            for f in futures:
                results.append(f.result())
                finished += len(results[-1])
                bar.at_least(finished)   # episodes on Dask workers count when their candidate's result arrives
            return PopulationResult(results)
