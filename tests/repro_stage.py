"""One pipeline stage on params.yaml in the current folder, without Prefect: the stage command of the temp
DVC repository that tests/integration/test_replay_dvc.py builds (the real flows would add a Prefect server per stage).
With TRINITY_TEST_STAGE_SERVER set, the stage runs in a fork of that warm process (tests/stage_server.py) instead
of importing torch and transformers here.

    python tests/repro_stage.py prepare|cache_states|evolve|frontier|evaluate
"""

from __future__ import annotations

import os
import sys


def main(stage: str) -> int:
    from trinity import config
    from trinity.pipeline.plain_stages import STAGES, run_stage

    if stage not in STAGES:   # refused by name; an error inside a stage keeps its traceback
        raise SystemExit(f"unknown stage {stage!r}: the stages are {', '.join(STAGES)}")
    run_stage(config.load("params.yaml", []), stage)
    return 0


if __name__ == "__main__":
    if server := os.environ.get("TRINITY_TEST_STAGE_SERVER"):
        from stage_server import run_remote

        raise SystemExit(run_remote(server, sys.argv[1:]))
    raise SystemExit(main(sys.argv[1]))
