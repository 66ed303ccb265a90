"""One pipeline stage on params.yaml in the current folder, without Prefect: the stage command of the temp
DVC repository that tests/integration/test_replay_dvc.py builds (the real flows would add a Prefect server per stage).

    python tests/repro_stage.py prepare|cache_states|evolve|frontier|evaluate
"""

from __future__ import annotations

import sys


def main(stage: str) -> int:
    from trinity import config

    cfg = config.load("params.yaml", [])
    if stage == "prepare":
        from trinity.pipeline.suites import prepare_from_config

        prepare_from_config(cfg, cfg.paths.prepared)
    elif stage == "cache_states":
        from trinity.pipeline import cache_states_stage

        cache_states_stage.run(cfg)
    elif stage == "evolve":
        from trinity.pipeline import evolve_stage

        evolve_stage.run(cfg)
    elif stage == "frontier":
        from trinity.pipeline import frontier_stage

        frontier_stage.run(cfg)
    elif stage == "evaluate":
        from pathlib import Path

        from trinity.pipeline import evaluate_stage

        evaluate_stage.run(cfg, frontier_path=Path(cfg.paths.frontier))
    else:
        raise SystemExit(f"unknown stage {stage!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
