"""Serve every flow as a deployment, so any stage can be triggered from the Prefect UI with
parameters (Hydra overrides), and optionally schedule recurring retraining (`schedule.cron`):
`trinity-retrain` runs flows/retrain.py (warm start from the registry's champion, champion vs
challenger, promote or keep); `trinity-pipeline` the whole pipeline once.

    make prefect-server      # UI at http://127.0.0.1:4200
    make deploy              # in another terminal; PREFECT_API_URL must point at that server
    make deploy CRON="0 3 * * 1"   # also retrain every Monday at 03:00 UTC

The deployments live as long as this process; prefect.yaml declares the same deployments on a work pool,
run by `prefect worker start` instead (docs/RETRAINING.md).
"""

from __future__ import annotations

import argparse

from prefect import serve
from prefect.schedules import Cron

from flows._common import apply_environment_defaults
from flows.ablate import ablate_flow
from flows.cache_states import cache_states_flow
from flows.evaluate import evaluate_flow
from flows.evolve import evolve_flow
from flows.frontier import frontier_flow
from flows.pipeline import pipeline_flow
from flows.prepare import prepare_flow
from flows.retrain import retrain_flow
from trinity import config


def deployments(cron: str | None, overrides: list[str]):
    default = {"params": None, "overrides": overrides}
    out = [
        f.to_deployment(name=f"trinity-{f.name}", parameters=default, tags=["trinity"],
                        description=(f.description or "").strip().splitlines()[0] if f.description else None)
        for f in (prepare_flow, cache_states_flow, evolve_flow, frontier_flow, ablate_flow, evaluate_flow)
    ]
    out.append(pipeline_flow.to_deployment(
        name="trinity-pipeline", parameters=default, tags=["trinity"],
        description="The whole pipeline (prepare -> ... -> evaluate) into a new run folder."))
    # cron fields are read in UTC, as prefect.yaml's schedule says too
    schedules = [Cron(cron, timezone="UTC")] if cron else None
    out.append(retrain_flow.to_deployment(
        name="trinity-retrain", parameters=default, schedules=schedules, tags=["trinity", "retrain"],
        description="Retrain from the champion, then promote the new coordinator only if it beats the champion; "
                    "scheduled when schedule.cron is set."))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cron", default=None,
                    help="cron schedule for trinity-retrain, read in UTC (default: schedule.cron)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides used by every deployment's default parameters")
    args = ap.parse_args()
    apply_environment_defaults()
    cfg = config.compose(args.overrides)
    cron = args.cron or cfg.schedule.cron
    serve(*deployments(cron, deployment_overrides(cfg.schedule.overrides, args.overrides)))


def deployment_overrides(schedule_overrides, cli_overrides) -> list[str]:
    """The deployments' default overrides: `schedule.overrides` first, then the command line's, which win.
    Both, not either: `make deploy` always passes `experiment=...`, which would otherwise hide the config's."""
    return [str(o) for o in schedule_overrides or []] + [str(o) for o in cli_overrides]


if __name__ == "__main__":
    main()
