"""docs/benchmarks/routing_signal/README.md: the figures `benchmarks/routing_signal.py --json` wrote per backbone
(smollm2_cached.json, qwen2.5_coder_0.5b_cached.json: the probe's AUCs, the first-turn routers, the per-suite
policies) and the trained coordinators of trained/ (`benchmarks/recorded_ablations.py`'s results per backbone,
`benchmarks/pair_ablations.py`'s paired.md, and the .md tables of the two variations), with the recording plan of
conf/experiment/local_agents.yaml and the power table of docs/benchmarks/power/ the reading cites."""

from __future__ import annotations

import json
import re
from typing import Any

FOLDER = "docs/benchmarks/routing_signal"
TRAINED = f"{FOLDER}/trained"
POWER = "docs/benchmarks/power/results.jsonl"
BACKBONES = {"smollm2": "SmolLM2-135M", "qwen2.5_coder_0.5b": "Qwen2.5-Coder-0.5B"}
ALPHA = 0.05
ROUTERS = {   # the file's name of a first-turn router, and how the page names it
    "suite router (per suite the agent with the best leave-one-out mean)":
        "per suite the agent of the best leave-one-out mean",
    "probe router (per item the agent of the highest leave-one-out prediction)":
        "per item the agent of the highest leave-one-out prediction",
    "oracle (some agent right: the room)": "oracle: some agent right (the room)",
}
DESCRIBED = {"qwen-steps as worker -> qwen-steps as worker -> qwen-python as worker":
             "step by step twice, then program of thought reading those two reference thoughts"}


def _missing(what: str) -> str:
    return f"Not measured yet ({what}).\n"


def _p(p: float) -> str:
    return "1" if p == 1 else f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _md(src: Any, name: str) -> tuple[str, list[dict[str, str]]]:
    path = src.path(f"{TRAINED}/{name}")
    text = path.read_text() if path.is_file() else ""
    return text, src.table_rows(text)


# --- the probe (one table and its reading per backbone) ----------------------------------------------------------

def _within(t: dict[str, Any], bold: bool = False) -> str:
    cell = f"{t['auc_within_suite']:.3f} ({t['auc_within_suite_null_mean']:.3f}, p = {t['p_within_suite']:.3f})"
    return f"**{cell}**" if bold and t["p_within_suite"] < ALPHA else cell


def _probe_table(sig: dict[str, Any]) -> list[str]:
    lines = ["| agent | right | AUC, suite alone | AUC, first-turn probe | within suites (null mean, p) | "
             "after its own answer, within suites (null mean, p) |", "|---|---:|---:|---:|---:|---:|"]
    for name, a in sig["agents"].items():
        first = a["first_turn"]
        lines.append(f"| {name} | {a['right']:.3f} | {a['auc_suite_alone']:.3f} | {first['auc_probe']:.3f} | "
                     f"{_within(first, bold=True)} | {_within(a['after_answer'])} |")
    return lines


def _probe_reading(sig: dict[str, Any]) -> str:
    """Whether the state carries item-level signal inside a suite, in the words the figures allow."""
    agents = sig["agents"]
    first_name, first = min(agents.items(), key=lambda kv: kv[1]["first_turn"]["p_within_suite"])
    after_name, after = min(agents.items(), key=lambda kv: kv[1]["after_answer"]["p_within_suite"])
    f, a = first["first_turn"], after["after_answer"]
    router = next(r for k, r in sig["routers"].items() if k.startswith("probe router"))
    best = sig["best_agent"]
    apart = " perfectly" if sig["suite_accuracy"] == 1 else ""
    if f["p_within_suite"] >= ALPHA:
        top_name, top = max(agents.items(), key=lambda kv: kv[1]["first_turn"]["auc_probe"])
        alike = (", at turn 0 and after the agent's own answer alike" if a["p_within_suite"] >= ALPHA
                 else f" at turn 0 (after its own answer, {after_name}'s {a['auc_within_suite']:.3f}, "
                      f"p = {a['p_within_suite']:.3f})")
        return (f"The state tells the suites apart{apart} (leave-one-out accuracy {sig['suite_accuracy']:.3f}), and "
                f"that is all it tells: every AUC above 0.5 is the suite's ({top_name}'s "
                f"{top['first_turn']['auc_probe']:.3f} against {top['auc_suite_alone']:.3f} for the suite alone), and "
                f"inside a suite the probe is at chance for every agent{alike}.")
    perms = sig["permutations"]
    above = round(f["p_within_suite"] * (perms + 1)) - 1
    rank = f"above all {perms} shuffles" if above == 0 else f"above all but {above} of {perms} shuffles"
    text = (f"Here the first-turn state does carry item-level signal: inside a suite it ranks the items {first_name} "
            f"gets right above those it gets wrong with AUC {f['auc_within_suite']:.3f}, {rank} (p = "
            f"{f['p_within_suite']:.3f}; the script's smallest possible p is 1/{perms + 1}).")
    if a["p_within_suite"] < ALPHA:
        text += (f" After {after_name}'s own answer, the state ranks whether that answer is right "
                 f"({a['auc_within_suite']:.3f}, p = {a['p_within_suite']:.3f}).")
    text += (f" A turn-0 router on these predictions (per item the agent of the highest prediction) scores "
             f"{router['reward']:.3f} against {best['name']}'s {best['reward']:.3f} on the {router['n']} items "
             f"({router['test'].replace('mcnemar', 'McNemar')} p = {_p(router['p_value'])})")
    if router["verdict"] != "win":
        text += (": the signal says which items are hard for the best agent more than which other agent would be "
                 "right there")
    return text + "."


def _probe(src: Any, backbone: str) -> str:
    sig = src.json(f"{FOLDER}/{backbone}_cached.json")
    if not sig:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/{backbone}_cached.json`")
    return "\n".join([*_probe_table(sig), "", _probe_reading(sig)]) + "\n"


def smollm2(src: Any) -> str:
    """SmolLM2-135M's probe: per agent the AUCs of the suite, the first-turn state and the state after its answer."""
    return _probe(src, "smollm2")


def qwen(src: Any) -> str:
    """Qwen2.5-Coder-0.5B's probe, the same table, and what its within-suite signal buys a turn-0 router."""
    return _probe(src, "qwen2.5_coder_0.5b")


# --- SmolLM2's routers and per-suite policies -------------------------------------------------------------------------

def routers(src: Any) -> str:
    """The first-turn routers on every item, paired against the best single agent."""
    sig = src.json(f"{FOLDER}/smollm2_cached.json")
    if not sig:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/smollm2_cached.json`")
    best = sig["best_agent"]
    lines = [f"First-turn routers on the same {sig['items']} items, paired against {best['name']} "
             f"({best['reward']:.3f}):", "", "| router | reward | difference | McNemar p | verdict |",
             "|---|---:|---:|---:|---|"]
    for name, r in sig["routers"].items():
        lines.append(f"| {ROUTERS.get(name, name)} | {r['reward']:.3f} | {r['difference']:+.3f} | {_p(r['p_value'])} | "
                     f"{r['verdict']} |")
    return "\n".join(lines) + "\n"


def _policy_words(policy: str) -> str:
    """`qwen-python as worker -> qwen-direct as verifier -> qwen-direct as worker` as `python answers, direct
    verifies, direct redoes`."""
    steps = [tuple(step.split(" as ")) for step in policy.split(" -> ")]
    words = []
    for i, (agent, role) in enumerate(steps):
        if role == "verifier":
            verb = "verifies"
        elif i and steps[i - 1][1] == "verifier":
            verb = "redoes"
        else:
            verb = "answers again" if (agent, "worker") in steps[:i] else "answers"
        words.append(f"{agent.removeprefix('qwen-')} {verb}")
    return ", ".join(words)


def _policy_count(sig: dict[str, Any]) -> int | None:
    """How many prompt-independent policies there are: one (agent, role) per turn, for K turns (the recording's
    K and roles, as its description names them)."""
    m = re.search(r"K = (\d+), roles ([\w, -]+?);", sig.get("recording", ""))
    if not m:
        return None
    return (len(sig["agents"]) * len(m[2].split(", "))) ** int(m[1])


def policies_intro(src: Any) -> str:
    """What the per-suite policies are, how many, and on how many train + validation items each was chosen."""
    sig = src.json(f"{FOLDER}/smollm2_cached.json")
    pol = sig.get("suite_policies")
    if not pol:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/smollm2_cached.json`")
    own = sorted({r["chosen_on"] for r in pol["rows"] if r["own"]})
    transfer = sorted({r["chosen_on"] for r in pol["rows"] if not r["own"]})
    count = _policy_count(sig)
    text = ("Multi-turn prompt-independent policies per suite (one (agent, role) per turn"
            + (f", {count} of them" if count else "") + "), chosen on each suite's "
            + (f"{own[0]}" if len(own) == 1 else f"{own[0]}-{own[-1]}") + " train + validation items and scored on its "
            "test items")
    if transfer:
        text += f"; the transfer suite gets the policy chosen on all {transfer[0]} train + validation items"
    return text + f"; against {pol['single']} (chosen the same way):\n"


def policies(src: Any) -> str:
    """The multi-turn policy chosen per suite on train + validation, scored on its test items."""
    pol = src.json(f"{FOLDER}/smollm2_cached.json").get("suite_policies")
    if not pol:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/smollm2_cached.json`")
    lines = [f"| suite | test items | policy chosen | policy | {pol['single']} |", "|---|---:|---|---:|---:|"]
    for r in pol["rows"]:
        suite = r["suite"] if r["own"] else f"{r['suite']} (transfer)"
        lines.append(f"| {suite} | {r['test_items']} | {_policy_words(r['policy'])} | {r['policy_test']:.3f} | "
                     f"{r['single_test']:.3f} |")
    lines.append(f"| all | {pol['n']} | | {pol['reward']:.3f} | {pol['single_reward']:.3f} "
                 f"({pol['test'].replace('mcnemar', 'McNemar')} p = {_p(pol['p_value'])}, {pol['verdict']}) |")
    return "\n".join(lines) + "\n"


# --- the coordinators trained on either backbone's states ----------------------------------------------------------

def trained(src: Any) -> str:
    """Per seed and backbone: the kept mean's train, validation and test rewards and its generation."""
    runs = {label: src.json(f"{TRAINED}/{name}.json") for name, label in BACKBONES.items()}
    if not all(runs.values()):
        return _missing("`benchmarks/recorded_ablations.py`, the command above, into trained/")
    items = {res["test_items"] for res in runs.values()}
    lines = ["| seed | backbone | train | validation (chose the kept mean) | "
             f"test ({'/'.join(map(str, sorted(items)))} items) | kept generation |", "|---|---|---:|---:|---:|---:|"]
    for label, res in runs.items():
        lines += [f"| {r['seed']} | {label} | {r['train_expected_reward']:.3f} | {r['validation_reward']:.3f} | "
                  f"{r['test_expected_reward']:.3f} | {r['best_generation']} |" for r in res["rows"]]
    return "\n".join(lines) + "\n"


def _and(values: list[Any]) -> str:
    return ", ".join(map(str, values[:-1])) + f" and {values[-1]}" if len(values) > 1 else str(values[0])


def trained_paired(src: Any) -> str:
    """The two backbones paired per seed (paired.md), against the best agent, and the generations `one_se` kept."""
    head, rows = _md(src, "paired.md")
    qwen_runs = src.json(f"{TRAINED}/qwen2.5_coder_0.5b.json")
    if not rows or not qwen_runs:
        return _missing("`benchmarks/pair_ablations.py`, the command above")
    best = re.search(r"best single agent single:(\S+) ([\d.]+)", head)
    differ = sum(r["verdict"] != "no significant difference" for r in rows)
    against = [float(r[k]) for r in rows for k in ("p (A vs best)", "p (B vs best)")]
    against_text = f"{min(against):g}" if min(against) == max(against) else f"{min(against):g}-{max(against):g}"
    neither = ("neither backbone differs significantly on any seed" if min(against) >= ALPHA
               else "a backbone differs significantly on some seed")
    gens = [r["best_generation"] for r in qwen_runs["rows"]]
    return ("Paired per seed (`trained/paired.md`): 0.5B minus SmolLM2 on test "
            + " / ".join(r["A - B"] for r in rows) + " (p = " + " / ".join(r["p (A vs B)"] for r in rows)
            + f", n = {head.split()[0]}), {differ or 'none'} significant; against {best[1]} ({best[2]}) {neither} "
            f"(p = {against_text}). On the 0.5B's states the rule `one_se` kept an early mean on every seed "
            f"(generations {_and(gens)}): its later validations were not one paired standard error better.\n")


def _range(values: list[float]) -> str:
    return f"{min(values):.3f}" if min(values) == max(values) else f"{min(values):.3f}-{max(values):.3f}"


def variations(src: Any) -> str:
    """The 0.5B's two variations: fewer features (the rank), and keeping the best validation."""
    _, rank = _md(src, "qwen2.5_coder_0.5b_rank.md")
    _, best = _md(src, "qwen2.5_coder_0.5b_select_max.md")
    if not rank or not best:
        return _missing("`benchmarks/recorded_ablations.py` with the rank variants and `evolve.validation.select=max`")
    ranked = [r for r in rank if r["variant"].startswith("rank ")]
    ranks = list(dict.fromkeys(r["variant"].removeprefix("rank ") for r in ranked))
    kept = {r["kept generation"] for r in ranked}
    kept_text = (f"kept generation {kept.pop()} on every seed" if len(kept) == 1
                 else f"kept generations {min(kept, key=int)} to {max(kept, key=int)}")

    def values(rows: list[dict[str, str]], column: str) -> list[float]:
        return [float(r[column]) for r in rows]

    test = values(ranked, "test (expected)") + values(best, "test (expected)")
    return (f"Two quick variations on the 0.5B's states, same seeds (`trained/qwen2.5_coder_0.5b_rank.md`, "
            f"`trained/qwen2.5_coder_0.5b_select_max.md`): fewer features (`coordinator.features.rank` "
            f"{', '.join(ranks)}) {kept_text}, test {_range(values(ranked, 'test (expected)'))}; keeping the best "
            f"validation instead (`evolve.validation.select=max`) kept generations "
            f"{_and([r['kept generation'] for r in best])}, train {_range(values(best, 'train (exact, kept mean)'))}, "
            f"validation {_range(values(best, 'validation'))}, test "
            + " / ".join(f"{v:.3f}" for v in values(best, "test (expected)"))
            + f". Neither moves the test reward off about {min(test):.2f}-{max(test):.2f}.\n")


# --- what it says ---------------------------------------------------------------------------------------------------

def reading_room(src: Any) -> str:
    """The room: how often some agent is right, against the best agent."""
    sig = src.json(f"{FOLDER}/smollm2_cached.json")
    if not sig:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/smollm2_cached.json`")
    oracle = next(r for k, r in sig["routers"].items() if k.startswith("oracle"))
    best = sig["best_agent"]
    return ("- **The room is per item, and the default coordinator's state does not see it.** Some agent is right on "
            f"{oracle['reward']:.3f} of the items against {best['reward']:.3f} for {best['name']}, but inside a suite "
            "the SmolLM2 state predicts no agent's correctness better than shuffled labels do. A linear head on these "
            "states can route by suite and by turn, not by item.\n")


def reading_suites(src: Any) -> str:
    """What the per-suite policies gain over the best agent, and where a chosen policy held up or did not."""
    pol = src.json(f"{FOLDER}/smollm2_cached.json").get("suite_policies")
    if not pol:
        return _missing(f"`benchmarks/routing_signal.py --json {FOLDER}/smollm2_cached.json`")
    single = pol["single"]
    own = [r for r in pol["rows"] if r["own"]]
    up = max(own, key=lambda r: r["policy_test"] - r["single_test"])
    down = min(own, key=lambda r: r["policy_test"] - r["single_test"])
    text = (f"- **By suite and turn there is little**: per suite {single} is the best first answer everywhere, and the "
            "best multi-turn policy per suite, chosen out of sample, gains "
            f"{pol['reward'] - pol['single_reward']:+.3f} over {single} on test (n = {pol['n']}, "
            f"p = {_p(pol['p_value'])}).")
    clauses = []
    if up["policy_test"] > up["single_test"]:
        words = DESCRIBED.get(up["policy"], _policy_words(up["policy"]))
        clauses.append(f"the one suite where a chosen policy held up is {up['suite']} ({words}: "
                       f"{up['policy_test']:.3f} against {up['single_test']:.3f} on {up['test_items']} items, too few "
                       "for a verdict)")
    if down["policy_test"] < down["single_test"]:
        clauses.append(f"on {down['suite']} the choice made on {down['chosen_on']} items did not carry over "
                       f"({down['policy_test']:.3f} against {down['single_test']:.3f})")
    if clauses:
        joined = "; ".join(clauses)
        text += f" {joined[0].upper()}{joined[1:]}."
    return text + "\n"


def reading_backbone(src: Any) -> str:
    """What the larger backbone's state sees, and whether the coordinator trained on it uses it."""
    sig = src.json(f"{FOLDER}/qwen2.5_coder_0.5b_cached.json")
    _, rows = _md(src, "paired.md")
    if not sig or not rows:
        return _missing("`benchmarks/routing_signal.py` and `benchmarks/pair_ablations.py`, the commands above")
    name, a = min(sig["agents"].items(), key=lambda kv: kv[1]["first_turn"]["p_within_suite"])
    f = a["first_turn"]
    differ = sum(r["verdict"] != "no significant difference" for r in rows)
    seeds = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}.get(len(rows), str(len(rows)))
    trained_words = (f"no better ({seeds} seeds, none significant either way)" if not differ
                     else f"significantly different on {differ} of {len(rows)} seeds (`trained/paired.md`)")
    if f["p_within_suite"] >= ALPHA:
        return ("- **A larger backbone does not see it either.** Within suites the Qwen2.5-Coder-0.5B state ranks no "
                f"agent's right and wrong items better than shuffled labels (best: {name}, AUC "
                f"{f['auc_within_suite']:.3f}, p = {f['p_within_suite']:.3f}); the coordinator trained on it is "
                f"{trained_words}.\n")
    return ("- **A larger backbone sees some of it, and training does not use it yet.** The Qwen2.5-Coder-0.5B state "
            f"ranks {name}'s right and wrong items within suites (AUC {f['auc_within_suite']:.3f}, p = "
            f"{f['p_within_suite']:.3f}), but the coordinator trained on it is {trained_words} on this recording's "
            "training items.\n")


def reading_goal(src: Any) -> str:
    """What the goal needs: the per-suite choices' items and policies, the training items per suite the recording
    plan asks for (conf/experiment/local_agents.yaml), and the test items the power table puts at the smallest gain."""
    sig = src.json(f"{FOLDER}/smollm2_cached.json")
    pol = sig.get("suite_policies")
    plan = ((src.yaml("conf/experiment/local_agents.yaml") or {}).get("record") or {}).get("items") or {}
    power = src.path(POWER)
    if not pol or not power.is_file():
        return _missing("`benchmarks/routing_signal.py` and `benchmarks/power.py`")
    rows = [json.loads(line) for line in power.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "gain" in r]
    gain = min(r["gain"] for r in rows)
    needed = [r["test_items_needed"] for r in rows if r["gain"] == gain and r["test_items_needed"]]
    own = sorted({r["chosen_on"] for r in pol["rows"] if r["own"]})
    count = _policy_count(sig)
    among = f" choose among {count} policies" if count else " choose the policies"
    growth = (f" ({plan['train']} training items per suite in the recording plan, `record.items`)"
              if "train" in plan else "")
    items = f"{min(needed):,} test items or more" if needed else "more than 5,000 test items"
    return ("- So the project's goal (a win over the best agent at p < 0.05 on >= 200 test items) needs, on the "
            "default backbone, a gain its inputs do not carry: more recorded items sharpen the per-suite choices "
            f"({own[0] if len(own) == 1 else f'{own[0]}-{own[-1]}'} items per suite{among} here) but cannot add "
            f"item-level signal. With the 0.5B backbone the signal exists and the recording's growth{growth} is what "
            "could let evolution find it; that is the experiment to repeat as the recording grows. The power table "
            f"(`docs/benchmarks/power/`) puts a gain of {gain:+.2f} at {items}.\n")


REGIONS = {"routing-signal-smollm2": smollm2, "routing-signal-routers": routers,
           "routing-signal-policies-intro": policies_intro, "routing-signal-policies": policies,
           "routing-signal-qwen": qwen, "routing-signal-trained": trained,
           "routing-signal-trained-paired": trained_paired, "routing-signal-variations": variations,
           "routing-signal-reading-room": reading_room, "routing-signal-reading-backbone": reading_backbone,
           "routing-signal-reading-suites": reading_suites, "routing-signal-reading-goal": reading_goal}
