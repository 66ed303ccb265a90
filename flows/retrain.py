"""Recurring retraining (the `trinity-retrain` deployment): prepare -> cache_states -> evolve, warm-started
from the registry's champion (`retrain.warm_start`), then champion vs challenger on the same test items
(trinity.pipeline.retrain_stage): the new coordinator is registered as a version in `paths.registry` and
replaces the champion only under `retrain.promote_rule`. The decision, with its reason, is the
`retrain-decision` markdown artifact. A run that fails or is interrupted leaves the registry as it was.

Started from a deployment, the stages write into a new folder under `paths.ad_hoc_runs`, never into the
DVC outputs; the registry (`paths.registry`) is shared.

    python -m flows.retrain [overrides]
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows._common import cli, load_cfg, prefect_logger, run_outputs
from flows._pool import local_pool
from flows.cache_states import cache_states_flow
from flows.evolve import evolve_flow
from flows.prepare import prepare_flow
from trinity import config
from trinity.config_schema import TrinityConfig

STAGES = ("prepare", "cache_states", "evolve")


@flow(name="retrain", log_prints=True)
def retrain_flow(params: str | None = None, overrides: list[str] | None = None,
                 output_paths: dict[str, str] | None = None) -> dict:
    from trinity.pipeline import retrain_stage
    from trinity.pipeline.workspace import apply_output_paths, earlier_outputs

    cfg = load_cfg(params, overrides)
    out = run_outputs(cfg, STAGES, "retrain", output_paths)
    # the stages read their config from a file (params.yaml, or conf/ + overrides): this run's, with
    # evolve.warm_start = retrain.warm_start, written where the run writes
    cfg = record_new_items(config.with_values(cfg, {"evolve.warm_start": cfg.retrain.warm_start}),
                           prefect_logger().info)
    folder = Path(out["runs"]).parent if out else Path(cfg.paths.cache) / "retrain"
    folder.mkdir(parents=True, exist_ok=True)
    run_params = folder / f"retrain-params-{uuid.uuid4().hex[:8]}.yaml"
    run_params.write_text(config.to_yaml(cfg))
    kw: dict[str, Any] = {"params": str(run_params), "overrides": None, "output_paths": out}
    # what changed since earlier runs is prepared and computed again; the rest is copied from them
    earlier = {key: earlier_outputs(cfg, "retrain", key, exclude=(out or {}).get(key))
               for key in ("prepared", "states")}
    prepared = prepare_flow(**kw, reuse_from=earlier["prepared"])
    states = cache_states_flow(**kw, reuse_from=earlier["states"])
    evolve_flow(**kw)
    cfg = apply_output_paths(cfg, out)
    source = str(run_params.parent) if out else cfg.paths.runs
    logger = prefect_logger()
    data = {"prepare": prepared.get("reuse") or {}, "cache_states": states.get("reuse") or {}}
    with local_pool(cfg):
        decision = retrain_stage.run(cfg, source_run=source, progress=logger.info, data_changes=data)
    create_markdown_artifact(key="retrain-decision", markdown=decision["markdown"],
                             description=f"{decision['version']}: {'promoted' if decision['promoted'] else 'kept'}")
    return {k: v for k, v in decision.items() if k != "markdown"}


def record_new_items(cfg: TrinityConfig, log) -> TrinityConfig:
    """retrain.new_items on a recording: record that many more items per suite and split with the live pool
    first (trinity.pipeline.record_stage.extend), so this run trains and gates on items the last did not
    see; returns the config whose record.items cover them. On a live pool, or with none asked, the config
    is returned as it is."""
    from trinity.assembly.local_pool import local_pool as start_local_pool
    from trinity.pipeline import record_stage

    new = dict(cfg.retrain.new_items)
    if not any(new.values()):
        if cfg.pool.replay is not None:
            log("retrain: on the recording's items as they are (retrain.new_items is 0: nothing new to learn "
                "unless the recording grew since the last run)")
        return cfg
    if cfg.pool.replay is None:
        log("retrain: retrain.new_items applies to a recording (pool.replay); a live pool answers new items anyway")
        return cfg
    live = record_stage.live_config(cfg)
    config.check_api_keys(live)   # recording calls the live pool
    grown, summary = record_stage.extend(cfg, new, progress=log, pool_context=lambda: start_local_pool(live))
    log(f"retrain: recording {summary.get('root')}: {summary.get('recorded', 0)} new items recorded"
        + (f", stopped: {summary['stopped']}" if summary.get("stopped") else ""))
    return grown


if __name__ == "__main__":
    cli(retrain_flow, __doc__)
