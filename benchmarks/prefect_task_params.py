"""What Prefect's walk over a task's parameters costs the evolve stage, and what quoting them saves.

Each candidate's rollouts run as one Prefect task (flows/_common.py `rollout_runner`) whose parameters are the
composed config as YAML, the candidate's flat parameter vector (4,608 numbers on the routing benchmark) and
the training items' uids. Unless a value is wrapped in `prefect.utilities.annotations.quote`, Prefect walks it
element by element twice per task (looking for futures and states to wait on) before the task starts. This
script submits the same tasks both ways on the same thread-pool task runner inside one flow, alternating, and
prints the seconds per task of each and their ratio. The task itself does almost nothing, so the figure is
the overhead alone.

    python benchmarks/prefect_task_params.py [--tasks 30] [--rounds 3] [--n-params 4608] [--items 189] [overrides]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def candidate(cfg_yaml: str, generation: int, candidate: int, params: list[float], item_uids: list[str],
              repeats: int) -> int:
    return len(params) + len(item_uids) + len(cfg_yaml)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30, help="tasks per batch (a generation's population)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-params", type=int, default=4608)
    parser.add_argument("--items", type=int, default=189, help="item uids per task")
    parser.add_argument("overrides", nargs="*", default=["experiment=routing_benchmark"])
    args = parser.parse_args(argv)

    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect.utilities.annotations import quote

    from trinity import config

    cfg_yaml = config.to_yaml(config.compose(args.overrides))
    params = [0.001 * i for i in range(args.n_params)]
    uids = [f"suite/item-{i:04d}" for i in range(args.items)]
    as_task = task(candidate, name="candidate", cache_policy=NO_CACHE)
    ways = {"walked": lambda v: v, "quoted": quote}
    seconds: dict[str, list[float]] = {name: [] for name in ways}

    @flow(name="prefect-task-params")
    def measure() -> None:
        with ThreadPoolTaskRunner(max_workers=4) as runner:
            for round_ in range(args.rounds + 1):           # round 0 warms up both ways; not counted
                for name, wrap in (ways.items() if round_ % 2 == 0 else reversed(ways.items())):
                    start = time.perf_counter()
                    futures = [runner.submit(as_task, parameters={
                        "cfg_yaml": wrap(cfg_yaml), "generation": wrap(0), "candidate": wrap(c),
                        "params": wrap(params), "item_uids": wrap(uids), "repeats": wrap(1)})
                        for c in range(args.tasks)]
                    results = [f.result() for f in futures]
                    assert results == [args.n_params + args.items + len(cfg_yaml)] * args.tasks
                    if round_:
                        seconds[name].append((time.perf_counter() - start) / args.tasks)

    measure()
    walked, quoted = statistics.median(seconds["walked"]), statistics.median(seconds["quoted"])
    print(json.dumps({"tasks_per_round": args.tasks, "rounds": args.rounds, "n_params": args.n_params,
                      "items": args.items, "config_yaml_chars": len(cfg_yaml),
                      "walked_s_per_task": round(walked, 4), "quoted_s_per_task": round(quoted, 4),
                      "ratio": round(walked / quoted, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
