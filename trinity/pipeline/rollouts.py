"""What the stages share about rollouts besides their runtime (trinity.pipeline.stage_runtime): the grader of a
whole config, a config's key, and the stop on replay misses."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from trinity.assembly.grading import Grader, memo_grader
from trinity.config import to_yaml
from trinity.config_schema import TrinityConfig

if TYPE_CHECKING:
    from trinity.tasks.graders.judge import Judge


def config_key(cfg: TrinityConfig) -> str:
    return hashlib.sha256(to_yaml(cfg).encode()).hexdigest()[:16]


def make_grader(cfg: TrinityConfig, judge: Judge | None = None) -> Grader:
    """The grader of `cfg`'s suites (trinity.assembly.grading.memo_grader), `judge` the pool a judged suite asks."""
    from trinity.pipeline.suites import suite_settings

    return memo_grader(suite_settings(cfg), judge=judge)


def stop_on_replay_misses(stage: str, misses: int) -> None:
    """Under replay_only a request the response cache lacks is a failed turn, so the stage's outputs are no
    replay: stop with an error that says so (after the run, so its checkpoints keep what it did)."""
    if misses:
        from trinity.pool.errors import CacheMissError

        raise CacheMissError(f"{stage}: {misses} pool request(s) were not in the response cache under replay_only "
                             "(each scored as a failed turn), so the outputs are no replay: pull the cache that ran "
                             "this pipeline (make responses-pull) or run with read_write")
