"""docs/benchmarks/agent_suites/README.md: the figures `benchmarks/agent_suites.py` wrote (results.json: per suite
and agent the accuracy, its Wilson interval, the completion tokens and truncated replies, the items any agent
solves and the items one agent solves where another fails). The agents' output caps are read from
conf/pool/local_agents.yaml, the pool the run used."""

from __future__ import annotations

import os
import re
from typing import Any

FOLDER = "docs/benchmarks/agent_suites"
POOL = "conf/pool/local_agents.yaml"
SUITES = {"gsm8k": "GSM8K", "humaneval": "HumanEval", "mmlu": "MMLU"}
WORDS = {"qwen-direct": "the direct answer", "qwen-steps": "step by step", "qwen-python": "program of thought"}
MISSING = ("Not measured yet (`python benchmarks/agent_suites.py --items 10 --no-start --out "
           f"{FOLDER} experiment=local_agents`).\n")


def _short(agents: list[str]) -> dict[str, str]:
    """`qwen-direct` -> `direct`: the agents' names without the prefix they share."""
    prefix = os.path.commonprefix(agents)
    return {a: a.removeprefix(prefix) or a for a in agents}


def _cap(src: Any, agent: str) -> int | None:
    setup = ((src.yaml(POOL).get("models") or {}).get(agent) or {}).get("setup") or {}
    return (setup.get("max_tokens") or {}).get("worker")


def _best(suite: dict[str, Any], short: dict[str, str]) -> str:
    correct = {a: r["correct"] for a, r in suite["agents"].items()}
    top = [short[a] for a, k in correct.items() if k == max(correct.values())]
    return top[0] if len(top) == 1 else ", ".join(top) + " (tie)"


def _truncated(src: Any, table: dict[str, Any], agent: str, first: bool) -> str:
    """`(5 of 30, all HumanEval at its 256 cap)` for the first agent named, `(4)` after it."""
    cut = table["suites"]["all"]["agents"][agent]["truncated"]
    if not first:
        return f"({cut})"
    where = [s for s, v in table["suites"].items() if s != "all" and v["agents"][agent]["truncated"]]
    cap = _cap(src, agent)
    tail = f", all {SUITES.get(where[0], where[0])}" if cut and len(where) == 1 else ""
    tail += f" at its {cap} cap" if tail and cap else ""
    return f"({cut} of {table['suites']['all']['agents'][agent]['n']}{tail})"


def accuracy(src: Any) -> str:
    """The calls and their time, the accuracy per suite and agent, and the completion tokens."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    table, agents = res["table"], res["table"]["agents"]
    short = _short(agents)
    seconds = re.search(r"(\d+) s$", res["source"])
    took = f", {int(seconds[1]):,} s" if seconds else ""
    lines = [f"{len(res['rows'])} calls{took}. `results.json` holds every row.", "",
             "| suite | items | " + " | ".join(agents) + " | best | any agent |",
             "|---|---|" + "---|" * len(agents) + "---|---|"]
    for name, suite in table["suites"].items():
        cells = [f"{r['accuracy']:.2f} [{r['wilson95'][0]:.2f}, {r['wilson95'][1]:.2f}]"
                 for r in (suite["agents"][a] for a in agents)]
        lines.append(f"| {name} | {suite['items']} | " + " | ".join(cells)
                     + f" | {_best(suite, short)} | {suite['any_agent_share']:.2f} |")
    every = table["suites"]["all"]["agents"]
    tokens = ", ".join(f"{short[a]} {every[a]['mean_completion_tokens']:.0f} {_truncated(src, table, a, i == 0)}"
                       for i, a in enumerate(agents))
    lines += ["", 'Accuracy [Wilson 95% interval]; "any agent": the share of items at least one agent answers right '
              "(what a router that picked the right agent per item would reach at turn 0). Mean completion tokens "
              f"(truncated replies): {tokens}."]
    return "\n".join(lines) + "\n"


def reading(src: Any) -> str:
    """What the table says: the best agent over all items, what the others solve where it fails, the cost spread."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return MISSING
    table = res["table"]
    every, per = table["suites"]["all"], table["suites"]
    best = max(table["agents"], key=lambda a: every["agents"][a]["correct"])
    others = sorted((a for a in table["agents"] if a != best), key=lambda a: -every["only_one_right"][f"{a}>{best}"])
    mine = every["agents"][best]
    fails = mine["n"] - mine["correct"]
    steps, humaneval = "qwen-steps", per.get("humaneval", {}).get("agents", {})
    cut = humaneval.get(steps, {}).get("truncated")
    cap = _cap(src, steps)
    tokens = {a: r["mean_completion_tokens"] for a, r in every["agents"].items()}
    per_suite = min(v["items"] for k, v in per.items() if k != "all")
    cheap, dear = min(tokens, key=tokens.get), max(tokens, key=tokens.get)
    solved = ", ".join(f"{WORDS.get(a, a)} {'solves ' if i == 0 else ''}{every['only_one_right'][f'{a}>{best}']}"
                       for i, a in enumerate(others))
    solved = " and ".join(solved.rsplit(", ", 1))
    return "\n".join([
        "- The per-suite winners differ only in ties at this size: program of thought is best or tied best on every "
        f"suite ({mine['accuracy']:.2f} over all {mine['n']} items), step by step ties it on GSM8K and loses on "
        f"HumanEval (prose around the code, {cut} replies cut at its {cap}-token cap), the direct answer ties it on "
        "HumanEval and is worst on GSM8K. Every interval overlaps every other: "
        f"{per_suite} items per suite cannot separate these agents, so a per-suite verdict needs the "
        "recording's items.",
        f"- The agents are right on different items: of the {fails} items {WORDS.get(best, best)} fails, {solved}; "
        f"over all {every['items']} items some agent is right on {every['any_agent']} ({every['any_agent_share']:.2f})"
        f" against {mine['correct']} ({mine['accuracy']:.2f}) for the best one alone. That margin "
        f"({every['any_agent_share'] - mine['accuracy']:+.2f} at turn 0, before verify-and-redo) is the room a "
        "coordinator has; whether the first-turn state can find it is what training on the recording measures.",
        f"- Cost differs {tokens[dear] / tokens[cheap]:.1f}x in completion tokens between {WORDS.get(cheap, cheap)} "
        f"and {WORDS.get(dear, dear)}, so at equal reward routing can also buy cheaper episodes.",
    ]) + "\n"


REGIONS = {"agent-suites": accuracy, "agent-suites-reading": reading}
