"""docs/benchmarks/learning_curve/README.md: the figures of the curve on SmolLM2-135M's states (results.json of
`benchmarks/recorded_ablations.py`, curve.txt of `benchmarks/learning_curve.py`) and on Qwen2.5-Coder-0.5B's
(qwen2.5_coder_0.5b/: the same two files, and paired_with_smollm2.md of `benchmarks/pair_ablations.py`), with the
state-signal figures of docs/benchmarks/routing_signal/ it cites."""

from __future__ import annotations

import re
from typing import Any

FOLDER = "docs/benchmarks/learning_curve"
QWEN = f"{FOLDER}/qwen2.5_coder_0.5b"
SIGNAL = "docs/benchmarks/routing_signal"
EVERY = "against every training item (per seed, p < 0.05)"   # curve.txt's columns
BEST = "against the best single agent (per seed, p < 0.05)"
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def _word(n: int) -> str:
    return WORDS[n] if 0 <= n < len(WORDS) else {20: "twenty", 30: "thirty", 40: "forty"}.get(n, str(n))


def _curve(src: Any, folder: str) -> dict[str, Any]:
    """curve.txt: its test items, the recording's size, the best single agent (name, test reward) and its rows."""
    path = src.path(f"{folder}/curve.txt")
    if not path.is_file():
        return {}
    text = path.read_text()
    best = re.search(r"best single agent on test: single:(\S+) ([\d.]+)", text)
    return {"test_items": int(text.split()[0]), "recording": int(re.search(r"\((\d+) items;", text)[1]),
            "best": best[1] if best else None, "best_reward": best[2] if best else None, "rows": src.table_rows(text)}


def _counts(cell: str) -> tuple[int, int, int]:
    """`0 above, 1 below, 9 n.s.` as (above, below, not significant)."""
    m = re.fullmatch(r"(\d+) above, (\d+) below, (\d+) n\.s\.", cell)
    return (int(m[1]), int(m[2]), int(m[3])) if m else (0, 0, 0)


def _reference_items(src: Any) -> dict[int, int]:
    """The reference's training items, per recording size, from whichever curve names them."""
    found = {}
    for folder in (FOLDER, QWEN):
        c = _curve(src, folder)
        for r in c.get("rows", []):
            if r[EVERY] == "(this is it)" and r["training items"].isdigit():
                found[c["recording"]] = int(r["training items"])
    return found


def _table(src: Any, folder: str) -> str:
    c = _curve(src, folder)
    if not c:
        command = f".venv/bin/python benchmarks/learning_curve.py {folder}/results.json > {folder}/curve.txt"
        return f"Not measured yet (`{command}`).\n"
    lines = ["| training items | seeds | test, mean over seeds | range | kept mean's train reward | "
             f"{EVERY} | against {c['best']} (per seed, p < 0.05) |", "|---:|---:|---:|---|---:|---|---|"]
    for r in c["rows"]:
        items, against = r["training items"], r[EVERY]
        if against == "(this is it)":
            n = _reference_items(src).get(c["recording"])
            items, against = (f"all ({n})" if n else "all"), "(the reference)"
        train = r["kept mean's train reward"]
        lines.append(f"| {items} | {r['seeds']} | {r['test, mean over seeds']} | {r['range']} | {train} | {against} | "
                     f"{r[BEST]} |")
    return "\n".join(lines) + "\n"


def smollm2(src: Any) -> str:
    """The SmolLM2 curve: its runs, the table of curve.txt, and the test rewards of x0 and the single agents."""
    res = src.json(f"{FOLDER}/results.json")
    c = _curve(src, FOLDER)
    if not res or not c:
        return _table(src, FOLDER)
    singles = {k.removeprefix("single:"): sum(v) / len(v) for k, v in res.get("references", {}).items()}
    agents = ", ".join(f"{a} {v:.3f}" for a, v in sorted(singles.items(), key=lambda kv: -kv[1]))
    return (f"Every run is scored exactly on the same {res['test_items']} test items of the recording at "
            f"{c['recording']} items. {len(res['rows'])} runs, {res['wall_s']:.0f} s. Every run's per-item rewards: "
            "`results.json`; per seed: `results.md`; the table below: `curve.txt`.\n\n" + _table(src, FOLDER)
            + f"\nFor scale on the same {res['test_items']} test items: x0 (uniform routing) "
            f"{res['rows'][0]['x0']:.3f}; the single agents {agents}.\n")


def _per_suite(n: int, suites: int | None) -> str:
    """`n` items spread over `suites` training suites, in words (`two or three`)."""
    if not suites:
        return "a few"
    low, high = n // suites, -(-n // suites)
    return _word(low) if low == high else f"{_word(low)} or {_word(high)}"


def flat(src: Any) -> str:
    """Whether fewer training items change the SmolLM2 coordinator's test reward: the fewest against all of them,
    the paired tests per seed, and what x0 gains."""
    res, c = src.json(f"{FOLDER}/results.json"), _curve(src, FOLDER)
    if not res or not c or not res.get("paired"):
        return "Not measured yet (see the commands above).\n"
    rows = c["rows"]
    sized = [r for r in rows if r["training items"].isdigit()]
    ref = next(r for r in rows if r[EVERY] == "(this is it)")
    every = _reference_items(src).get(c["recording"])
    fewest = min(sized, key=lambda r: int(r["training items"]))
    k = int(fewest["training items"])
    pol = _signal(src, "smollm2").get("suite_policies") or {}
    per = _per_suite(k, sum(1 for r in pol.get("rows", []) if r.get("own")))
    counts = [_counts(r[EVERY]) for r in sized]
    tests, differ = sum(map(sum, counts)), sum(a + b for a, b, _ in counts)
    paired = res["paired"][0]
    test = paired["test"].replace("_", "-")
    means = [float(r["test, mean over seeds"]) for r in rows]
    seeds = _word(max(int(r["seeds"]) for r in rows))
    all_text = f"all {every}" if every else "all of them"
    compare = (f"({fewest['test, mean over seeds']} against {ref['test, mean over seeds']} over {seeds} seeds)")
    tested = f"{tests} paired tests, {test} on per-item expected rewards, n = {paired['n']} each"
    if differ:
        return (f"- **The curve is not flat everywhere.** {_word(k).capitalize()} training items ({per} per suite) "
                f"against {all_text} {compare}: {_word(differ)} of the seeds' runs on fewer items differ significantly "
                f"from their run on all of them ({tested}).\n")
    further = f" The {every - k} further training items add nothing it can use." if every else ""
    return (f"- **The curve is flat.** {_word(k).capitalize()} training items ({per} per suite) give the same test "
            f"reward as {all_text} {compare}; no seed's run on fewer items differs significantly from its run on all "
            f"of them ({tested}). Whatever the coordinator learns here, it learns from {per} items per suite: which "
            f"suite it is and that {c['best']} answers (x0 {res['rows'][0]['x0']:.3f} -> "
            f"{sum(means) / len(means):.2f}).{further}\n")


def qwen_runs(src: Any) -> str:
    """The Qwen2.5-Coder-0.5B curve's runs: its test items, the recording's size, the runs and their wall time."""
    res, c = src.json(f"{QWEN}/results.json"), _curve(src, QWEN)
    if not res or not c:
        return _table(src, QWEN)
    return (f"Every run is scored on the same {res['test_items']} test items of the recording at {c['recording']} "
            f"items. {len(res['rows'])} runs, {res['wall_s']:.0f} s.\n")


def _signal(src: Any, backbone: str) -> dict[str, Any]:
    return src.json(f"{SIGNAL}/{backbone}_cached.json")


def _clearest(sig: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The agent whose first-turn within-suite signal is the least likely under shuffled labels."""
    return min(sig["agents"].items(), key=lambda kv: kv[1]["first_turn"]["p_within_suite"])


def qwen_signal(src: Any) -> str:
    """What the routing-signal check found in Qwen2.5-Coder-0.5B's first-turn states."""
    sig = _signal(src, "qwen2.5_coder_0.5b")
    if not sig:
        return "Not measured yet (`benchmarks/routing_signal.py`, see docs/benchmarks/routing_signal/).\n"
    agent, a = _clearest(sig)
    return (f"The routing-signal check found that Qwen2.5-Coder-0.5B's first-turn state ranks the items {agent} gets "
            f"right above those it gets wrong, within suites (AUC {a['first_turn']['auc_within_suite']:.3f}, "
            f"p = {a['first_turn']['p_within_suite']:.3f} on {sig['items']} items).\n")


def qwen(src: Any) -> str:
    """The Qwen2.5-Coder-0.5B curve, as curve.txt tabulates it."""
    return _table(src, QWEN)


def qwen_reading(src: Any) -> str:
    """The two backbones paired per seed and size, the 0.5B's signal, and the generations `one_se` kept."""
    paired = src.path(f"{QWEN}/paired_with_smollm2.md")
    res, c, sig = src.json(f"{QWEN}/results.json"), _curve(src, QWEN), _signal(src, "qwen2.5_coder_0.5b")
    if not paired.is_file() or not res or not c or not sig:
        return "Not measured yet (`benchmarks/pair_ablations.py`, see the commands above).\n"
    text = paired.read_text()
    rows = src.table_rows(text)
    diffs = [float(r["A - B"]) for r in rows]
    gens = [r["best_generation"] for r in res["rows"]]
    sizes = [int(n) for r in c["rows"] if (n := r["training items"]).isdigit()]
    agent, a = _clearest(sig)
    return (f"Flat again, and the same as SmolLM2's at every size: paired per seed and size on the same "
            f"{text.split()[0]} test items (`qwen2.5_coder_0.5b/paired_with_smollm2.md`, {len(rows)} tests) the two "
            f"backbones differ by {min(diffs):+.3f} to {max(diffs):+.3f}, no p below "
            f"{min(float(r['p (A vs B)']) for r in rows):g}. The 0.5B's within-suite signal is real but weak (an AUC "
            f"of {a['first_turn']['auc_within_suite']:.2f} on one agent's correctness says which items are hard for "
            f"{agent} more than which other agent would be right there, as the routing-signal page found), and "
            f"evolution on {min(sizes)} to {max(sizes)} items does not turn it into reward. On the 0.5B's states the "
            f"rule `one_se` kept generation {min(gens)} in {gens.count(min(gens))} of the {len(gens)} runs: later "
            "means rarely validated one paired standard error better.\n")


def reading(src: Any) -> str:
    """What the state-signal check predicted, and the gap to the best single agent."""
    c, sig = _curve(src, FOLDER), _signal(src, "smollm2")
    if not c or not sig:
        return "Not measured yet (see the commands above).\n"
    aucs = [a["first_turn"]["auc_within_suite"] for a in sig["agents"].values()]
    apart = "perfectly" if sig["suite_accuracy"] == 1 else f"with accuracy {sig['suite_accuracy']:.3f}"
    means = [float(r["test, mean over seeds"]) for r in c["rows"]]
    against = [_counts(r[BEST]) for r in c["rows"]]
    runs, below = sum(map(sum, against)), sum(b for _, b, _ in against)
    mean = sum(means) / len(means)
    every = "every run is below it on average" if max(means) < float(c["best_reward"]) else "not every run is below it"
    return ("- This is what the state-signal check predicted ([routing_signal](../routing_signal/README.md)): the "
            f"default backbone's first-turn state separates the suites {apart} and carries no within-suite signal "
            f"about which agent is right (AUC {min(aucs):.2f}-{max(aucs):.2f}). More items of the same kind sharpen an "
            "estimate of a per-suite policy, which the first items already find; they cannot add an item signal the "
            "state lacks. **So recording more items does not, by itself, bring the default coordinator to a win over "
            "its best agent**, whatever the power calculation ([power](../power/README.md)) says about the items a win "
            "would need to show.\n"
            f"- The gap to {c['best']} alone ({mean:.2f} against {float(c['best_reward']):.2f}) is not closed by data "
            f"either: {every}, {_word(below)} of {_word(runs)} significantly.\n")


def goal(src: Any) -> str:
    """How far the coordinator trails the best agent at every size on both backbones; the room the oracle leaves."""
    curves = [c for c in (_curve(src, FOLDER), _curve(src, QWEN)) if c]
    sig = _signal(src, "smollm2")
    if not curves or not sig:
        return "Not measured yet (see the commands above).\n"
    best, reward = curves[0]["best"], float(curves[0]["best_reward"])
    gaps = [reward - float(r["test, mean over seeds"]) for c in curves for r in c["rows"]]
    sizes = [int(n) for c in curves for r in c["rows"] if (n := r["training items"]).isdigit()]
    sizes += [n for n in _reference_items(src).values()]
    seeds = {int(r["seeds"]) for c in curves for r in c["rows"]}
    oracle = next(r for name, r in sig["routers"].items() if name.startswith("oracle"))
    both = "on both backbones" if len(curves) == 2 else "on this backbone"
    return (f"A win over {best} at p < 0.05 needs the coordinator to gain on it; here its mean over "
            f"{_word(max(seeds))} seeds trails it by {min(gaps):.3f} to {max(gaps):.3f} at every training size "
            f"measured, {both}, and its test reward does not move between {min(sizes)} and {max(sizes)} training "
            "items. Recording toward 400 items adds test items (sharper verdicts) and training items, and this curve "
            "says the second do not lift the coordinator within the range measured. What could: agents that differ "
            "more per item than three setups of one 1.5B model do (the room, some agent right at turn 0, is "
            f"{oracle['reward']:.3f} against {sig['best_agent']['reward']:.3f} for the best one on {sig['items']} "
            "items, but the states cannot see where), which this machine's packages do not offer.\n")


REGIONS = {"learning-curve-smollm2": smollm2, "learning-curve-flat": flat, "learning-curve-qwen-signal": qwen_signal,
           "learning-curve-qwen-runs": qwen_runs, "learning-curve-qwen": qwen,
           "learning-curve-qwen-reading": qwen_reading, "learning-curve-reading": reading, "learning-curve-goal": goal}
