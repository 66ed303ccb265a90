"""Stage `record`: record every pool call the protocol can make on the chosen items (trinity record).
Resumable: a rerun continues where a killed one stopped; a finished recording makes no call."""

from __future__ import annotations

from prefect import flow

from flows._common import cli, load_cfg, prefect_logger
from flows._pool import local_pool


@flow(name="record", log_prints=True)
def record_flow(params: str | None = "params.yaml", overrides: list[str] | None = None) -> dict:
    from trinity.pipeline import record_stage

    cfg = record_stage.live_config(load_cfg(params, overrides))   # pool=recorded records from its live pool
    logger = prefect_logger()
    out = record_stage.run(cfg, progress=lambda line: logger.info("%s", line), pool_context=lambda: local_pool(cfg))
    return out


if __name__ == "__main__":
    cli(record_flow, __doc__)
