"""docs/COST_FRONTIER.md: the figures `benchmarks/cost_frontier.py` printed, one JSON line per call, kept in
docs/benchmarks/cost_frontier/ (gen30.json and gen10.json on the routing benchmark at 30 and 10 generations,
local_small.json on the live local pool), and the routing benchmark's validation items from its config."""

from __future__ import annotations

import re
from typing import Any

FOLDER = "docs/benchmarks/cost_frontier"
GOAL = ("The goal (a frontier head within 0.02 of the cost-blind head's reward at no more than half its cost per "
        "query)")
ROUTING_BENCHMARK = "conf/experiment/routing_benchmark.yaml"
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def _run(src: Any, name: str) -> dict[str, Any]:
    return src.json(f"{FOLDER}/{name}.json")


def _missing(name: str, args: str) -> str:
    return (f"Not measured yet (`python benchmarks/cost_frontier.py {args} | tail -n 1 > "
            f"{FOLDER}/{name}.json`).\n")


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _weight(head: dict[str, Any]) -> str:
    return f"{head['cost_weight']:g}"


def _blind(res: dict[str, Any]) -> str:
    """The cost-blind head's name: the one trained at cost weight 0."""
    return next(name for name, h in res["heads"].items() if h["cost_weight"] == 0)


def _ratio(res: dict[str, Any], name: str) -> float:
    return res["heads"][name]["cost_per_query"] / res["heads"][_blind(res)]["cost_per_query"]


def _beaten_by(res: dict[str, Any], name: str) -> list[str]:
    """The heads with a higher reward at a lower cost than `name`."""
    me = res["heads"][name]
    return [n for n, h in res["heads"].items()
            if h["reward"] > me["reward"] and h["cost_per_query"] < me["cost_per_query"]]


def _episodes(src: Any, res: dict[str, Any]) -> str:
    """The training episodes of one run, as the budget adds them up: the population's, then x0 and the
    validations of the mean in both routing modes on the experiment's validation items."""
    b = res["budget"]
    total, population = b["training_episodes_per_run"], b["popsize"] * b["episodes_per_candidate"] * b["generations"]
    items = ((src.yaml(ROUTING_BENCHMARK).get("evolve") or {}).get("validation") or {}).get("n_items")
    text = f"population {b['popsize']} x {b['episodes_per_candidate']} episodes x {b['generations']} generations"
    rounds, rest = divmod(total - population, 2 * items) if items else (0, 1)
    if rounds > 1 and not rest:
        text += f", plus x0 and {rounds - 1} validations of the mean in both modes on {items} items"
    return f"{text} = {total:,} episodes per run"


def measured(src: Any) -> str:
    """What the routing benchmark's sweeps ran on, and the 30-generation sweep's budget."""
    res = _run(src, "gen30")
    if not res:
        return _missing("gen30", "--weights 20 30 40 50 70 100 --generations 30")
    profile = re.search(r"profile '([^']+)'", res["pool"])
    pool = f"`{profile[1]}` profile with its prices" if profile else res["pool"]
    unit = {"usd": "dollars", "ktokens": "thousands of tokens"}.get(res["cost_unit"], res["cost_unit"])
    weights = " ".join(f"{w:g}" for w in res["weights"])
    return (f"**Measured** (this 2-core machine, shared with other work; routing benchmark, {pool}, seed "
            f"{res['seed']}, {unit}; every run at the same budget; the {res['test_items']} test items, "
            f"{res['routing']} routing). The script prints one JSON line; the lines and the pictures are in "
            f"`{FOLDER}/`.\n\n"
            f"*{res['budget']['generations']} generations* (`benchmarks/cost_frontier.py --weights {weights} "
            f"--generations {res['budget']['generations']}`; {_episodes(src, res)}):\n")


def local_small_budget(src: Any) -> str:
    """The live local pool's budget per head."""
    res = _run(src, "local_small")
    if not res:
        return _missing("local_small", "--experiment local_small --weights 0.1 0.3 1000 5000")
    b = res["budget"]
    return (f"Its budget: population {b['popsize']} x {b['episodes_per_candidate']} fixed items x "
            f"{b['generations']} generations per head, {res['test_items']} test items, {res['routing']} routing, "
            "the pool's notional list prices.\n")


def gen30(src: Any) -> str:
    """Every head of the 30-generation sweep: reward and cost per query with their intervals, on the frontier."""
    res = _run(src, "gen30")
    if not res:
        return _missing("gen30", "--weights 20 30 40 50 70 100 --generations 30")
    blind = _blind(res)
    lines = ["| head | cost weight | test reward [95% CI] | dollars per query [95% CI] | tokens per query | "
             "on the frontier |", "|---|---|---|---|---|---|"]
    for name, h in res["heads"].items():
        label = f"`{name}` (cost-blind)" if name == blind else f"`{name}`"
        frontier = "yes" if h["on_frontier"] else "no"
        if name == blind and not h["on_frontier"] and _beaten_by(res, name):
            frontier += f" ({_and([f'`{n}`' for n in _beaten_by(res, name)])} beats it on both)"
        (rlo, rhi), (clo, chi) = h["reward_ci"], h["cost_ci"]
        lines.append(f"| {label} | {_weight(h)} | {h['reward']:.3f} [{rlo:.3f}, {rhi:.3f}] | "
                     f"{h['cost_per_query']:.5f} [{clo:.5f}, {chi:.5f}] | {h['tokens_per_query']:,.0f} | {frontier} |")
    return "\n".join(lines) + "\n"


def _against_blind(res: dict[str, Any], name: str, near: bool) -> str:
    """One frontier head set against the cost-blind one: its reward and its share of the cost-blind cost."""
    h, ref = res["heads"][name], res["heads"][_blind(res)]
    ratio = f"**{_ratio(res, name):.2f}**" if near else f"{_ratio(res, name):.2f}"
    if round(h["reward"], 3) == round(ref["reward"], 3):
        return f"`{name}` has exactly the cost-blind reward ({h['reward']:.3f}) at {ratio} of its cost"
    if h["reward"] > ref["reward"]:
        return f"`{name}` a higher reward ({h['reward']:.3f}) at {ratio}"
    return f"`{name}` costs {ratio} of it at {ref['reward'] - h['reward']:.3f} less reward"


def gen30_goal(src: Any) -> str:
    """Whether the 30-generation frontier meets the goal, head by head against the cost-blind one."""
    res = _run(src, "gen30")
    if not res:
        return _missing("gen30", "--weights 20 30 40 50 70 100 --generations 30")
    near, blind = res["near_cost_blind"], res["heads"][_blind(res)]
    verdict = "met" if near["goal_met"] else "missed narrowly" if near["cost_ratio"] <= 0.6 else "missed"
    heads = [near["head"], *(n for n in res["frontier"] if n != near["head"])]
    parts = [_against_blind(res, n, n == near["head"]) for n in heads]
    text = f"{GOAL} is **{verdict} at this budget**: " + ", ".join(parts[:-1]) + (", and " if parts[1:] else "")
    text += parts[-1] + "."
    if not near["goal_met"]:
        lo, hi = blind["cost_ci"]
        spread = max(hi - blind["cost_per_query"], blind["cost_per_query"] - lo) / blind["cost_per_query"]
        wider = "wider" if spread > near["cost_ratio"] / 0.5 - 1 else "narrower"
        text += f" The cost-blind head's own cost interval (+-{100 * spread:.0f}%) is {wider} than the miss."
    return text + "\n"


def gen10(src: Any) -> str:
    """The 10-generation sweep: the head nearest the goal against the cost-blind one, and the other heads."""
    res = _run(src, "gen10")
    if not res:
        return _missing("gen10", "--weights 20 100 --generations 10")
    near, heads = res["near_cost_blind"], res["heads"]
    h, ref = heads[near["head"]], heads[_blind(res)]
    weights = " ".join(f"{w:g}" for w in res["weights"])
    verdict = ("met and more" if near["reward_gap"] < 0 else "met") if near["goal_met"] else "missed"
    others = [f"`{n}` {heads[n]['reward']:.3f} at ${heads[n]['cost_per_query']:.5f}"
              for n in res["frontier"] if n != near["head"]]
    text = (f"*{res['budget']['generations']} generations* (`--weights {weights} --generations "
            f"{res['budget']['generations']}`; {res['budget']['training_episodes_per_run']:,} episodes per run): "
            f"here the goal is {verdict}: `{near['head']}` reaches {h['reward']:.3f} [{h['reward_ci'][0]:.3f}, "
            f"{h['reward_ci'][1]:.3f}] at ${h['cost_per_query']:.5f} per query against the cost-blind head's "
            f"{ref['reward']:.3f} [{ref['reward_ci'][0]:.3f}, {ref['reward_ci'][1]:.3f}] at "
            f"${ref['cost_per_query']:.5f}, **{near['cost_ratio']:.2f} of its cost**")
    return text + (f"; {'; '.join(others)}." if others else ".") + "\n"


def _baselines(res: dict[str, Any]) -> str:
    """The baselines, best reward first, the specialists alone as one range."""
    base = res["baselines"]
    special = [n for n in base if n.startswith("single:") and n.endswith("-specialist")]
    rows = [(v["reward"], f"`{n}` {v['reward']:.3f} at ${v['cost_per_query']:.5f}")
            for n, v in base.items() if n not in special]
    if special:
        rewards = sorted(base[n]["reward"] for n in special)
        costs = sorted(base[n]["cost_per_query"] for n in special)
        rows.append((rewards[-1], f"each specialist alone {rewards[0]:.2f} to {rewards[-1]:.2f} at "
                                  f"${costs[0]:.4f} to ${costs[-1]:.4f}"))
    return ", ".join(text for _, text in sorted(rows, key=lambda r: -r[0]))


def baselines(src: Any) -> str:
    """The baselines on the routing benchmark's test items, and where the frontier heads stand against them."""
    runs = [r for r in (_run(src, "gen30"), _run(src, "gen10")) if r]
    if not runs:
        return _missing("gen30", "--weights 20 30 40 50 70 100 --generations 30")
    which = "either budget" if len({_baselines(r) for r in runs}) == 1 else "30 generations"
    text = f"Baselines on the same items ({which}): {_baselines(runs[0])}"
    heads = [r["heads"][n] for r in runs for n in r["frontier"]]
    base = [b for r in runs for b in r["baselines"].items()]
    if min(h["reward"] for h in heads) > max(b["reward"] for _, b in base):
        dearer = dict.fromkeys(n for n, b in base if b["cost_per_query"] > max(h["cost_per_query"] for h in heads))
        text += ": every frontier head above every baseline in reward"
        text += f", and cheaper than {_and([f'`{n}`' for n in dearer])}" if dearer else ""
    return text + ".\n"


def local_small(src: Any) -> str:
    """The live local pool's second call, and its heads (identical ones on one row) and baselines."""
    res = _run(src, "local_small")
    if not res:
        return _missing("local_small", "--experiment local_small --weights 0.1 0.3 1000 5000")
    heads, blind = res["heads"], _blind(res)
    added = [_weight(heads[n]) for n, t in res["training"].items() if not t["resumed"]]
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, h in heads.items():
        key = (h["reward"], tuple(h["reward_ci"]), h["cost_per_query"], h["tokens_per_query"])
        groups.setdefault(key, []).append(name)
    same = len({k for k, names in groups.items() if blind not in names}) == 1
    lines = []
    if added:
        lines.append(f"The second call added {_and(added)} and took {round(res['wall_s'] / 60)} min, since the "
                     "response cache answered every baseline again."
                     + (" At this budget the frontier separates nothing:" if same else ""))
        lines.append("")
    lines += ["| head or baseline | test reward [95% CI] | dollars per query | tokens per query |",
              "|---|---|---|---|"]
    for names in groups.values():
        h = heads[names[0]]
        label = ", ".join(f"`{n}`" for n in names) + (" (cost-blind)" if names == [blind] else "")
        lines.append(f"| {label} | {h['reward']:.2f} [{h['reward_ci'][0]:.2f}, {h['reward_ci'][1]:.2f}] | "
                     f"{h['cost_per_query']:.6f} | {h['tokens_per_query']:.0f} |")
    for name, b in sorted(res["baselines"].items(), key=lambda item: -item[1]["reward"]):
        lines.append(f"| `{name}` | {b['reward']:.2f} | {b['cost_per_query']:.6f} | |")
    return "\n".join(lines) + "\n"


def training(src: Any) -> str:
    """Each training run's calls and the ones that reached the pool, and the times of the runs trained last."""
    res, short = _run(src, "gen30"), _run(src, "gen10")
    if not res:
        return _missing("gen30", "--weights 20 30 40 50 70 100 --generations 30")
    t, blind = res["training"], _blind(res)
    first = [n for n in t if n != blind and t[n]["resumed"]]
    new = [n for n in t if not t[n]["resumed"]]
    b = t[blind]
    text = (f"Training cost, one response cache per budget: at {res['budget']['generations']} generations the "
            f"cost-blind run sent {b['pool_calls']:,} of its {b['calls']:,} calls to the pool "
            f"({b['cache_hits']:,} were cache hits)")
    if first:
        calls = [t[n]["calls"] for n in first]
        sent = [f"`{n}` {t[n]['pool_calls']:,}" for n in first]
        text += (f"; then {_and(sent)} calls reached the pool (of {round(min(calls), -3):,.0f} to "
                 f"{round(max(calls), -3):,.0f} calls each): a later weight replays the calls, and reuses the "
                 "features, that earlier runs made")
    text += "."
    if new and first:
        resumed = [t[n]["wall_s"] for n in t if t[n]["resumed"]]
        walls = [f"{t[n]['wall_s']:.0f}" for n in new]
        reached = [f"{t[n]['pool_calls']:,}" for n in new]
        text += (f" A second call adding weights {_and([_weight(res['heads'][n]) for n in new])} resumed the "
                 f"{NUMBER_WORDS.get(len(resumed), len(resumed))} finished runs ({min(resumed):.0f} to "
                 f"{max(resumed):.0f} s each) and trained the new ones in {_and(walls)} s with {_and(reached)} "
                 "calls reaching the pool.")
    if short:
        s, sb = short["training"], _blind(short)
        heads = [f"`{n}` {'took ' if i == 0 else ''}{s[n]['wall_s']:.0f} s ({s[n]['pool_calls']:,}"
                 + (" pool calls)" if i == 0 else ")") for i, n in enumerate(n for n in s if n != sb)]
        text += (f" At {short['budget']['generations']} generations {_and(heads)} after the cost-blind run's "
                 f"{s[sb]['wall_s']:.0f} s ({s[sb]['pool_calls']:,}).")
    return text + "\n"


REGIONS = {"cost-frontier-measured": measured, "cost-frontier-local-small-budget": local_small_budget,
           "cost-frontier-gen30": gen30, "cost-frontier-gen30-goal": gen30_goal, "cost-frontier-gen10": gen10,
           "cost-frontier-baselines": baselines, "cost-frontier-local-small": local_small,
           "cost-frontier-training": training}
