"""Can the coordinator's first-turn state tell WHICH agent will be right on an item? A probe of the room
routing has on a recording, before any evolution.

The hindsight bound says how often some agent is right where the best one is wrong; this says how much of
that a router reading the backbone's first-turn state (the cached `data/states`, exactly what the head
reads at turn 0) could find. For every item of the recording (all splits: this measures signal, it trains
no coordinator) and every agent, the target is that agent's recorded turn-0 Worker grade. A ridge probe on
the standardised states predicts it, scored leave-one-out (exact, from the hat matrix), at every ridge
strength of a grid; the best strength is picked in hindsight, so the figures are optimistic for the probe
(trinity/eval/state_signal.py, which the evaluate report on a recording also uses).

Printed per agent: the probe's leave-one-out AUC over all items, the AUC of the suite alone (each item's
leave-one-out suite mean: what telling the suites apart gives), and the probe's AUC WITHIN suites (pairs of
items of one suite only: item-level signal beyond the suite). Then three first-turn routers, each agent's
grade of the agent it picks, paired against the best single agent on the same items: the suite router
(per suite the agent with the best leave-one-out mean), the probe router (per item the agent with the
highest leave-one-out prediction), and the per-item oracle (some agent right). Last, out of sample: per
suite the best multi-turn prompt-independent policy of the suite's train + validation items, scored on its
test items (what a coordinator that only tells the suites apart could reach), paired against the best single
agent.

The probe also reads the state after each agent's own answer (turn 1, where the recording's later states are
cached or `--compute` computes them): can the coordinator see whether the answer it just got is right?

    python benchmarks/routing_signal.py [--permutations 200] [--compute] [--json F] [override ...]
        (default: the default experiment's recording and cached states; --compute coordinator=qwen2.5_coder_0.5b
        computes another backbone's states: 440 forward passes for 111 items)

Needs the prepared items and the cached states (`trinity run prepare cache_states`, or a `make run`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trinity.eval.state_signal import LAMBDAS, Ridge, first_turn_signal, loo_group_mean, probe, standardise  # noqa: E402

SPLITS = ("train", "validation", "test")


def load(cfg, compute: bool = False) -> dict:
    """Every recorded item with a first-turn state: uids, suites, first-turn states, each agent's turn-0 Worker
    grade, and the state of the transcript after that agent's answer (nan where not available). The states
    are the cached ones (`data/states`, with the recording's later transcripts) or, with `compute`, computed
    here by the configured coordinator's backbone (another backbone than the cache's: `coordinator=...`)."""
    from trinity.assembly.pool_client import pool_client
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.episodes.protocol import first_turn_transcript
    from trinity.pipeline.cache_states_stage import _text_key
    from trinity.pipeline.items import load_split
    from trinity.pipeline.recorded import RecordedWorld
    from trinity.pipeline.state_files import first_turn_states, read_state_cache, state_path
    from trinity.record import bounds

    pool = pool_client(cfg)
    if getattr(pool, "replay", None) is None:
        raise SystemExit("this needs a recording: pool=recorded (pool.replay)")
    world = RecordedWorld(cfg, pool.replay, list(cfg.coordinator.roles))
    protocol = ProtocolConfig.from_config(cfg.protocol)
    suites = list(cfg.tasks.train) + list(cfg.tasks.transfer)
    items = [it for sp in SPLITS for it in load_split(cfg, suites, sp)]
    compiled = world.compiled(items)
    agents = list(world.agents)
    grades = np.array([[bounds.single_worker(c, a) for a in range(len(agents))] for c in compiled])
    firsts = [first_turn_transcript(protocol, it.prompt) for it in items]
    afters: list[list[str | None]] = []
    for c in compiled:
        row: list[str | None] = []
        for a in range(len(agents)):
            outs = c.states[0].actions.get((a, "worker")) or []
            single = len(outs) == 1 and outs[0].child >= 0
            row.append(world.transcripts[c.states[outs[0].child].transcript] if single else None)
        afters.append(row)
    if compute:
        from trinity.assembly.coordinator import coordinator_from_config
        from trinity.pipeline.state_files import features_at_positions

        coord = coordinator_from_config(cfg)
        position = int(cfg.coordinator.token_position)
        texts = firsts + [t for row in afters for t in row if t is not None]
        total, done, started = len(set(texts)), [0], time.perf_counter()

        def progress(k: int) -> None:
            done[0] += k
            rate = done[0] / max(time.perf_counter() - started, 1e-9)
            print(f"states {done[0]}/{total} with {cfg.coordinator.backbone.id} ({rate:.2f}/s, "
                  f"about {(total - done[0]) / max(rate, 1e-9) / 60:.0f} min left)", flush=True)

        by_text = features_at_positions(coord, texts, [position], progress)[position]
        first_of = {t: by_text[t] for t in firsts}
        later = {_text_key(t): f for t, f in by_text.items()}
    else:
        missing = [s for s in suites if not state_path(cfg.paths.states, s).is_file()]
        if missing:
            raise SystemExit(f"no cached states of {', '.join(missing)} in {cfg.paths.states}: "
                             "run `trinity run prepare cache_states` first")
        by_uid = first_turn_states(cfg.paths.states, suites)
        first_of = {t: by_uid[it.uid] for it, t in zip(items, firsts, strict=True) if it.uid in by_uid}
        later = {}
        later_path = state_path(cfg.paths.states, "recorded-transcripts")
        if later_path.is_file():
            keys, feats, _ = read_state_cache(later_path)
            later.update(zip(keys, feats, strict=False))
    if not first_of:
        raise SystemExit("no recorded item has a first-turn state: the states are of other items (another experiment's "
                         "cache_states?); rerun `trinity run cache_states` with the same overrides")
    dim = len(next(iter(first_of.values())))
    after = np.full((len(items), len(agents), dim), np.nan)
    for i, row in enumerate(afters):
        for a, text in enumerate(row):
            if text is not None and _text_key(text) in later:
                after[i, a] = later[_text_key(text)]
    keep = np.array([t in first_of for t in firsts]) & ~np.isnan(grades).any(axis=1)
    return {"uids": [it.uid for it, k in zip(items, keep, strict=True) if k],
            "suites": [it.suite for it, k in zip(items, keep, strict=True) if k],
            "states": np.stack([first_of[t] for t, k in zip(firsts, keep, strict=True) if k]).astype(np.float64),
            "grades": grades[keep], "after": after[keep], "agents": agents,
            "backbone": str(cfg.coordinator.backbone.id), "world": world}


def suite_policies(cfg, world) -> dict:
    """Per in-distribution suite, the prompt-independent multi-turn policy (one (agent, role) per turn) that is
    best on the suite's train + validation items, scored exactly on its test items; a transfer suite gets the
    policy chosen on every training suite's train + validation items pooled. Paired on the test items against
    the best single agent (chosen the same way: on train + validation). What a coordinator that only tells
    the suites apart could reach out of sample."""
    from trinity.pipeline.items import load_split
    from trinity.record import bounds

    roles = list(cfg.coordinator.roles)
    agents, turns = list(world.agents), int(world.protocol.max_turns)

    def fitted(suites: list[str]) -> list:
        return world.compiled([it for s in suites for sp in ("train", "validation") for it in load_split(cfg, [s], sp)])

    def best_policy(compiled: list) -> tuple:
        table = bounds.fixed_policies(compiled, len(agents), roles, turns)
        return max(table, key=table.get)

    pooled = fitted(list(cfg.tasks.train))
    single = max(range(len(agents)), key=lambda a: float(np.mean([bounds.single_worker(c, a) for c in pooled])))
    pooled_policy = best_policy(pooled)
    rows, policy_values, single_values = [], [], []
    for suite in list(cfg.tasks.train) + list(cfg.tasks.transfer):
        test = world.compiled(load_split(cfg, [suite], "test"))
        if not test:
            continue
        own = fitted([suite]) if suite in cfg.tasks.train else []
        policy = best_policy(own) if own else pooled_policy
        values = [bounds.follow(c, policy) for c in test]
        base = [bounds.single_worker(c, single) for c in test]
        rows.append({"suite": suite, "chosen_on": len(own) or len(pooled), "own": bool(own), "test_items": len(test),
                     "policy": " -> ".join(f"{agents[a]} as {r}" for a, r in policy),
                     "policy_test": float(np.mean(values)), "single_test": float(np.mean(base))})
        policy_values += values
        single_values += base
    return {"single": agents[single], "rows": rows, "policy_values": policy_values, "single_values": single_values}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--permutations", type=int, default=200, help="label shuffles for the within-suite p-value")
    parser.add_argument("--compute", action="store_true",
                        help="compute the states with the configured coordinator instead of reading data/states")
    parser.add_argument("--json", default=None, help="also write every figure to this file")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (e.g. experiment=local_small)")
    args = parser.parse_args(argv)
    from trinity import config
    from trinity.pipeline.recorded import describe_recording
    from trinity.stats import paired_test, verdict

    cfg = config.load(None, list(args.overrides))
    recording = describe_recording(cfg) or "no recording"
    data = load(cfg, compute=args.compute)
    suites, grades, agents = data["suites"], data["grades"], data["agents"]
    n = len(suites)
    if n < 10:
        raise SystemExit(f"too few recorded items with states ({n})")
    signal = first_turn_signal(data["states"], grades, suites, agents, permutations=args.permutations, seed=0)
    names = sorted(set(suites))
    groups, predictions = signal.pop("groups"), signal.pop("predictions")
    print(recording)
    print(f"coordinator backbone {data['backbone']} ({'computed here' if args.compute else 'cached states'}); "
          f"{n} items with a first-turn state ({', '.join(f'{s} {suites.count(s)}' for s in names)}); "
          f"ridge strengths {', '.join(f'{v:g}' for v in LAMBDAS)}, each AUC at its best one (in hindsight); "
          f"within-suite p-values from {args.permutations} shuffles of the labels inside each suite")
    print(f"suite told from the first-turn state (leave-one-out, ridge 10): accuracy {signal['suite_accuracy']:.3f}")

    facts: dict = {"recording": recording, "backbone": data["backbone"], **signal}
    print("\nagent | right | AUC suite alone | first-turn probe AUC | within suites (null mean, p) | "
          "after its own answer: within suites (null mean, p)")
    print("--- | ---: | ---: | ---: | ---: | ---:")
    for a, name in enumerate(agents):
        y, row = grades[:, a], facts["agents"][name]
        turn0 = row["first_turn"]
        have = ~np.isnan(data["after"][:, a]).any(axis=1)
        if have.sum() >= 10:
            turn1 = probe(Ridge(standardise(data["after"][have, a])), y[have], groups[have], args.permutations,
                          np.random.default_rng([0, a, 1]))
            turn1.pop("predictions")
            row["after_answer"] = {**turn1, "items": int(have.sum())}
            t1 = (f"{turn1['auc_within_suite']:.3f} ({turn1['auc_within_suite_null_mean']:.3f}, "
                  f"p = {turn1['p_within_suite']:.3g}; {int(have.sum())} items)")
        else:
            t1 = "no cached later states"
        print(f"{name} | {row['right']:.3f} | {row['auc_suite_alone']:.3f} | {turn0['auc_probe']:.3f} | "
              f"{turn0['auc_within_suite']:.3f} ({turn0['auc_within_suite_null_mean']:.3f}, "
              f"p = {turn0['p_within_suite']:.3g}) | {t1}")

    best_agent = int(grades.mean(axis=0).argmax())
    suite_means = np.stack([loo_group_mean(grades[:, a], groups) for a in range(len(agents))], axis=1)
    routers = {
        "suite router (per suite the agent with the best leave-one-out mean)":
            grades[np.arange(n), suite_means.argmax(axis=1)],
        "probe router (per item the agent of the highest leave-one-out prediction)":
            grades[np.arange(n), predictions.argmax(axis=1)],
        "oracle (some agent right: the room)": grades.max(axis=1),
    }
    print(f"\nfirst-turn routers against the best single agent, {agents[best_agent]} "
          f"({grades[:, best_agent].mean():.3f}), paired on the same {n} items:")
    facts["best_agent"] = {"name": agents[best_agent], "reward": float(grades[:, best_agent].mean())}
    facts["routers"] = {}
    for label, values in routers.items():
        t = paired_test(values, grades[:, best_agent], samples=4000, seed=0)
        facts["routers"][label] = {"reward": float(values.mean()), "difference": t.mean_a - t.mean_b,
                                   "p_value": t.p_value, "test": t.test, "n": t.n, "verdict": verdict(t)}
        print(f"- {label}: {values.mean():.3f} ({t.mean_a - t.mean_b:+.3f}, {t.test} p = {t.p_value:.3g}, "
              f"n = {t.n}: {verdict(t)})")
    suite = suite_policies(cfg, data["world"])
    print(f"\nmulti-turn prompt-independent policies per suite, chosen on train + validation, scored on test, "
          f"against the best single agent chosen the same way ({suite['single']}):")
    for r in suite["rows"]:
        where = f"its {r['chosen_on']} train + validation items" if r["own"] else \
            f"the training suites' {r['chosen_on']} train + validation items (transfer suite)"
        print(f"- {r['suite']} ({r['test_items']} test items; chosen on {where}): {r['policy']}: "
              f"{r['policy_test']:.3f} against {r['single_test']:.3f}")
    if suite["policy_values"]:
        t = paired_test(suite["policy_values"], suite["single_values"], samples=4000, seed=0)
        print(f"- all suites: {t.mean_a:.3f} against {t.mean_b:.3f} ({t.mean_a - t.mean_b:+.3f}, {t.test} "
              f"p = {t.p_value:.3g}, n = {t.n}: {verdict(t)})")
        facts["suite_policies"] = {"single": suite["single"], "rows": suite["rows"], "reward": t.mean_a,
                                   "single_reward": t.mean_b, "p_value": t.p_value, "test": t.test, "n": t.n,
                                   "verdict": verdict(t)}
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
