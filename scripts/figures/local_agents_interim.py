"""docs/benchmarks/local_agents_interim/README.md, an archived interim result on the agents pool's recording: the
files its runs wrote in its folder. The first run at 43 items: report.md, eval.json, evolve.json; at 96 items:
at_96_items/ (the same files); `benchmarks/recorded_ablations.py`: ablations_3_seeds/results.json (97 items) and
ablations_3_seeds_113/results.json (113 items); `benchmarks/recorded_states_threads.py`:
states_threads_alone.jsonl and states_threads_loaded.jsonl."""

from __future__ import annotations

import json
import re
from typing import Any

FOLDER = "docs/benchmarks/local_agents_interim"
ALPHA = 0.05
REFERENCE = "sep-CMA-ES, exact fitness"
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# the 113-item table: (label, the variants of results.json it stands for)
SEEDS_113 = (("sep-CMA-ES, exact fitness (the default's training)", ("sep-CMA-ES, exact fitness",)),
             ("sep-CMA-ES, sampled fitness (the paper's)", ("sep-CMA-ES, sampled fitness",)),
             ("random search", ("random search",)), ("REINFORCE", ("REINFORCE",)),
             ("no roles (x0 of a Worker-only head)", ("no roles",)), ("last token", ("last token",)),
             ("entropy bonus 0.15 (the paper's)", ("entropy bonus 0.15",)),
             ("L2 1 / 10 / 100", ("no entropy, l2 1", "no entropy, l2 10", "no entropy, l2 100")),
             ("rejection note", ("rejection note",)),
             ("rank 0-16", ("rank 0", "rank 1", "rank 2", "rank 4", "rank 8", "rank 16")))
SHORT = {"entropy bonus 0.15": "the entropy bonus"}
# the exact expected rewards' tables: (the method in the report's table, or the start of its name; label here)
FIXED, X0, HINDSIGHT, BEST_POLICY = ("fixed policy (chosen on train+validation)", "x0 (= random)", "bound: hindsight",
                                     "bound: best prompt-independent policy")
AT_96 = ((HINDSIGHT, "bound: hindsight"), (FIXED, None),
         (BEST_POLICY, "bound: best prompt-independent policy (hindsight)"),
         ("single:qwen-python", "`single:qwen-python`"), ("trinity:argmax", "`trinity:argmax`"),
         ("trinity", "**`trinity`**"), ("single:qwen-steps", "`single:qwen-steps`"),
         ("single:qwen-direct", "`single:qwen-direct`"), (X0, "x0 (= `random`)"))
FIRST_RUN = ((HINDSIGHT, "bound: hindsight (every turn chosen knowing every reply)"),
             (BEST_POLICY, "bound: best prompt-independent policy, chosen on the test items (hindsight)"),
             ("single:qwen-python", "`single:qwen-python` (program of thought, one turn)"),
             (FIXED, "fixed policy chosen on train + validation"),
             ("single:qwen-direct", "`single:qwen-direct`"), ("trinity", "**`trinity`** (sampled routing)"),
             ("single:qwen-steps", "`single:qwen-steps`"), (X0, "x0 (= `random`)"))
THREADS = (("states_threads_alone.jsonl", ("nothing else running (recorder and its server stopped)",
                                           "nothing else running")),
           ("states_threads_loaded.jsonl", ("beside the recorder (its llama.cpp server decoding on 2 threads, "
                                            "`nice 10`)", "beside the recorder")))


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def _count(n: int) -> str:
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _missing(file: str) -> str:
    return f"Not measured yet (`{FOLDER}/{file}` is missing).\n"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(values: list[float], fmt: str, every: str, group: bool) -> str:
    """One variant's seeds `a / b / c` (a group of variants: `low-high`), or one value and `every` if all agree."""
    texts = [format(v, fmt) for v in values]
    if len(set(texts)) == 1:
        return texts[0] + every
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}" if group else " / ".join(texts)


def _significant(res: dict[str, Any], seeds: list[int]) -> str:
    """The paired tests against the reference that reach ALPHA: x0 apart, then the trained variants."""
    hits = [t for t in res["paired"] if t["p_value"] < ALPHA]
    x0 = [t for t in hits if t["other"] == "x0"]
    where = "on every seed" if len(x0) == len(seeds) else "on seeds " + ", ".join(str(t["seed"]) for t in x0)
    parts = [f"x0 {where} (p = {', '.join(_p(t['p_value']) for t in x0)})"] if x0 else []
    trained = [t for t in hits if t["other"] != "x0"]
    for i, t in enumerate(trained):
        side = "below" if t["other_mean"] < t["reference_mean"] else "above"
        name = SHORT.get(t["other"], f"`{t['other'].removeprefix('no entropy, ')}`")
        parts.append(f"{name} {side} {'it' if i else 'the reference'} on seed {t['seed']} ({t['other_mean']:.3f} vs "
                     f"{t['reference_mean']:.3f}, p = {_p(t['p_value'])})")
    tests = len(res["paired"])
    others = sorted({t["other"] for t in res["paired"]} - {"x0"})
    comparisons = tests - len(seeds)
    expected = comparisons * ALPHA
    sides = {t["other_mean"] < t["reference_mean"] for t in trained}
    chance = "is what chance gives" if len(trained) <= 2 * expected else "is more than chance gives"
    own = [t["p_value"] for t in res["paired"] if t["other"] == "no entropy bonus"]
    own_text = f" (`no entropy bonus` is the reference's own setting, p = {max(own):g})" if own else ""
    return (f"Of the {tests} paired tests against the reference ({len(others)} variants and x0, per seed), "
            f"{_count(len(hits))} reach p < {ALPHA}: {_and(parts)}. "
            f"{_count(len(trained)).capitalize()} of the {comparisons} comparisons between trained variants at "
            f"p < {ALPHA}{', in opposite directions,' if len(sides) == 2 else ''} {chance} (about {expected:.1f} "
            f"expected at alpha {ALPHA}), so none of them orders the variants{own_text}.")


def seeds_113(src: Any) -> str:
    """Every ablation and training variant, 3 seeds, at 113 items: the table and its paired tests."""
    res = src.json(f"{FOLDER}/ablations_3_seeds_113/results.json")
    if not res:
        return _missing("ablations_3_seeds_113/results.json")
    seeds = res["seeds"]
    rows = {(r["seed"], r["variant"]): r for r in res["rows"]}
    lines = ["| variant | test | validation | kept generation |", "|---|---|---|---|"]
    for label, variants in SEEDS_113:
        group = len(variants) > 1
        runs = [rows[(s, v)] for v in variants for s in seeds]
        every = " (every run)" if group else " (every seed)"
        cells = [_cell([r["test_expected_reward"] for r in runs], ".3f", every, group),
                 _cell([r["validation_reward"] for r in runs], ".3f", every if group else "", group),
                 _cell([r["best_generation"] for r in runs], "d", every if group else "", group)]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    best, scores = max(((name, _mean(v)) for name, v in res["references"].items()), key=lambda kv: kv[1])
    x0 = rows[(seeds[0], REFERENCE)]["x0"]
    lines += ["", f"For scale on the same {res['test_items']} items: {best.removeprefix('single:')} alone "
              f"{scores:.3f}, x0 {x0:.3f}. " + _significant(res, seeds)]
    return "\n".join(lines) + "\n"


def _report(src: Any, folder: str) -> dict[str, Any]:
    """What the run's report.md says that its metrics files do not: its table of exact expected rewards (each
    method's reward, and its paired test against `trinity`: verdict and p), the items, the cost and the
    prompt-independent policy it chose. The metrics keep 4 decimals, the report rounds the exact values."""
    text = src.path(f"{folder}/report.md").read_text()
    table = re.findall(r"^\| `?([^|`]+)`? \| (\d\.\d+) \| ([^|]*) \|$", text, re.M)
    rewards = {name: float(value) for name, value, _ in table}
    against = {name: (m[1].strip(), m[2]) for name, _, test in table if (m := re.match(r"(.*)\(p = ([\d.]+)\)", test))}
    cost = re.search(r"`trinity` (\d+), the best single agent as the only Worker (\d+)", text)
    single = re.search(r"in-distribution, (\d+) test items\)\? [^:]*: (it beats \d+ of \d+, [^.]+)\.", text)
    policy = re.search(r"chosen on the training and validation items: ([^;]+);", text)
    return {"items": int(re.search(r"On (\d+) paired test items", text)[1]), "against": against, "rewards": rewards,
            "cost": (int(cost[1]), int(cost[2])), "in_distribution": (int(single[1]), single[2]),
            "suite_items": sorted({int(n) for n in re.findall(r"^- \w+, n = (\d+):", text, re.M)}),
            "policy": re.sub(r" as (\w+)", lambda m: f" {m[1].capitalize()}", policy[1])}


def _reward(rep: dict[str, Any], method: str) -> float:
    """A method's exact expected reward in the report's table, by its name or the start of it (the bounds)."""
    rewards = rep["rewards"]
    return rewards[method] if method in rewards else next(v for k, v in rewards.items() if k.startswith(method))


def _singles(rep: dict[str, Any]) -> tuple[str, float]:
    """The best single agent of the report's table: its name and exact expected reward."""
    best = max((k for k in rep["rewards"] if k.startswith("single:")), key=rep["rewards"].get)
    return best, rep["rewards"][best]


def _rewards(rep: dict[str, Any], rows: tuple[tuple[str, str | None], ...], head: str) -> list[str]:
    lines = [f"| {head} |", "|---|---:|"]
    for method, label in rows:
        value = f"{_reward(rep, method):.3f}"
        label = label or f"fixed policy chosen on train + validation ({rep['policy']})"
        lines.append(f"| {label} | {f'**{value}**' if label.startswith('**') else value} |")
    return lines


def _ablations(ev: dict[str, Any]) -> tuple[str, str, list[float]]:
    """The ablations' lowest and highest test reward (`0.303 (last token)`) and their paired p against trinity."""
    scores = {k.removeprefix("test/all/ablation:"): v for k, v in ev.items() if k.startswith("test/all/ablation:")}
    low, high = min(scores, key=scores.get), max(scores, key=scores.get)
    ps = [ev[f"test/paired/ablation:{name}/p_value"] for name in scores]
    return (f"{scores[low]:.3f} ({low.replace('_', ' ')})", f"{scores[high]:.3f} ({high.replace('_', ' ')})", ps)


def _seed_runs(res: dict[str, Any]) -> str:
    """The 97-item ablations, 3 seeds: each variant's test reward per seed, and the paired tests that reach ALPHA."""
    names = {REFERENCE: "sep-CMA-ES with exact fitness", "sep-CMA-ES, sampled fitness": "sampled fitness"}
    seeds = res["seeds"]
    parts = []
    for variant in dict.fromkeys(r["variant"] for r in res["rows"]):
        values = [f"{r['test_expected_reward']:.3f}" for s in seeds for r in res["rows"]
                  if r["variant"] == variant and r["seed"] == s]
        text = f"{values[0]} (all seeds)" if len(set(values)) == 1 else " / ".join(values)
        which = "" if parts else f" (seeds {', '.join(map(str, seeds))})"
        parts.append(f"{names.get(variant, variant)} {text}{which}")
    x0 = [t for t in res["paired"] if t["other"] == "x0"]
    hits = [t for t in res["paired"] if t["other"] != "x0" and t["p_value"] < ALPHA]
    beats = (f"it beats x0 on every seed (p <= {_p(max(t['p_value'] for t in x0))})"
             if all(t["verdict"] == "win" for t in x0) else "it does not beat x0 on every seed")
    if hits:
        seed = f" on seed {hits[0]['seed']} only" if len({t["seed"] for t in hits}) == 1 else ""
        beats += (f", {_and([t['other'] for t in hits])}{seed} "
                  f"(p = {', '.join(_p(t['p_value']) for t in hits)})")
    rest = "no significant difference" if all(t["verdict"] == "win" for t in hits) else "a loss or none"
    items = re.search(r"\((\d+) items", res["recording"])[1]
    return (f"- The paper's ablations with 3 seeds on the {items}-item recording (`ablations_3_seeds/`, "
            f"{res['wall_s']:.0f} s; {res['test_items']} test items): {'; '.join(parts)}. Paired per seed against "
            f"exact sep-CMA-ES: {beats}; every other pair shows {rest}. Too few items to order the optimisers.")


def at_96(src: Any) -> str:
    """The run at 96 items: its exact expected rewards and what its report, metrics and the 3-seed ablations say."""
    folder = f"{FOLDER}/at_96_items"
    ev, evolve = src.json(f"{folder}/eval.json"), src.json(f"{folder}/evolve.json")
    seeds = src.json(f"{FOLDER}/ablations_3_seeds/results.json")
    if not ev or not evolve or not seeds or not src.path(f"{folder}/report.md").is_file():
        return _missing("at_96_items/")
    rep = _report(src, folder)
    n, mine, x0 = rep["items"], _reward(rep, "trinity"), _reward(rep, X0)
    best, best_reward = _singles(rep)
    (x0_verdict, x0_p), (best_verdict, best_p) = rep["against"][X0], rep["against"][best]
    fixed, (fixed_verdict, fixed_p) = _reward(rep, FIXED), rep["against"][FIXED]
    fit, (low, high, ps) = evolve["kept_mean_fit"], _ablations(ev)
    in_items, in_text = rep["in_distribution"]
    suite, agents = rep["suite_items"], sum(k.startswith("single:") for k in rep["rewards"])
    lines = _rewards(rep, AT_96, f"method (exact expected reward, {n} test items) | reward") + [
        "",
        f"- {'Learns: `trinity` beats x0' if x0_verdict == 'win' else '`trinity` does not beat x0'}, {mine:.3f} vs "
        f"{x0:.3f}, sign-flip p = {x0_p}, n = {n}.",
        f"- {'Beats' if best_verdict == 'win' else 'Does not beat'} its best agent: {mine:.3f} vs {best_reward:.3f} "
        f"for {best.removeprefix('single:')}, p = {best_p}, n = {n} ({best_verdict}"
        f"{', the sign against it' if mine < best_reward else ''}); in-distribution ({in_items} items) "
        f"{in_text.replace(f' of {agents},', f' of {agents} agents,')}; per suite "
        f"({'/'.join(map(str, suite))} items each) too few items.",
        f"- A prompt-independent policy chosen on the training and validation items ({fixed:.3f}) is "
        f"{'above' if fixed > best_reward else 'not above'} every single agent on test ("
        f"{'not significantly' if fixed_verdict == 'no significant difference' else fixed_verdict} against "
        f"`trinity`: p = {fixed_p}): the agents leave routing something to gain; the coordinator does not get it yet.",
        f"- It still over-fits: the kept mean scores {fit['train']:.3f} on its {fit['train_items']} training items, "
        f"{fit['validation']:.3f} on validation ({fit['validation_items']} items, generation {fit['generation']} kept "
        f"by `{evolve['validation_select']}`), {mine:.3f} on test.",
        f"- The ablations (one seed each): {low} to {high}, {'none' if min(ps) >= ALPHA else 'not all'} "
        f"significantly different from `trinity` (p {min(ps):.2f}-{max(ps):.2f}, n = {n}).",
        _seed_runs(seeds)]
    return "\n".join(lines) + "\n"


def first_run(src: Any) -> str:
    """The first run at 43 items: its report's exact expected rewards, the paired tests, over-fitting and cost."""
    ev, evolve = src.json(f"{FOLDER}/eval.json"), src.json(f"{FOLDER}/evolve.json")
    if not ev or not evolve or not src.path(f"{FOLDER}/report.md").is_file():
        return _missing("report.md")
    rep = _report(src, FOLDER)
    n, mine, x0 = rep["items"], _reward(rep, "trinity"), _reward(rep, X0)
    best, best_reward = _singles(rep)
    (best_verdict, best_p), (x0_verdict, x0_p) = rep["against"][best], rep["against"][X0]
    few = "too few items"
    fit, (low, high, ps) = evolve["kept_mean_fit"], _ablations(ev)
    mine_cost, single_cost = rep["cost"]
    lines = _rewards(rep, FIRST_RUN, "method | expected reward") + [
        "",
        f"- Against the best single agent: {mine:.3f} vs {best_reward:.3f}, sign-flip p = {best_p}, n = {n}: "
        f"{'too few items for a verdict' if best_verdict.startswith(few) else best_verdict}"
        f"{', and the sign is against the coordinator' if mine < best_reward else ''}. Against x0: {mine:.3f} vs "
        f"{x0:.3f}, p = {x0_p}, n = {n} ({few if x0_verdict.startswith(few) else x0_verdict}).",
        f"- **Over-fitting shows, as the report's split line was built to show it**: the kept mean's exact reward is "
        f"{fit['train']:.3f} on its {fit['train_items']} training items, {fit['validation']:.3f} on the "
        f"{fit['validation_items']} validation items (generation {fit['generation']}, kept by "
        f"`{evolve['validation_select']}`; the highest validation, generation {evolve['max_validation_generation']}, "
        f"scored {evolve['max_validation_reward']:.3f}) and {mine:.3f} on test. The last generation's best fitness on "
        f"the training items was {evolve['final_fitness_max']:.3f}. A head of {evolve['n_params']:,} numbers on "
        f"{fit['train_items']} training items learns the items, not the routing.",
        f"- The ablations (one seed each, the default budget) land between {low} and {high}, every one within "
        f"p > {int(min(ps) * 100) / 100:.2f} of `trinity`.",
        f"- Cost: `trinity` {mine_cost:,} expected tokens per episode, the best single agent as the only Worker "
        f"{single_cost:,}."]
    return "\n".join(lines) + "\n"


def threads(src: Any) -> str:
    """`benchmarks/recorded_states_threads.py`: one suite's states by torch thread count, alone and beside the
    recorder, and what the feature engine computed for them."""
    runs = []
    for file, labels in THREADS:
        path = src.path(f"{FOLDER}/{file}")
        if not path.is_file():
            return _missing(file)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        runs += list(zip(labels, [r for r in rows if "threads" in r], strict=True))
    lines = ["| condition | threads | wall | CPU | prompts/s |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {label} | {r['threads']} | {r['wall_s']:.1f} s | {r['cpu_s']:.1f} s | {r['prompts_per_s']:.2f} |"
              for label, r in runs]
    r = runs[0][1]
    padding = 1 - r["computed_tokens"] / r["batch_slots"]
    lines += ["", f"(`{THREADS[0][0]}`, `{THREADS[1][0]}`: one JSON line per measurement.) {r['suite']}: "
              f"{r['items']} items, {r['prompts']} prompts, {r['tokens']:,} tokens, of which {r['reused_tokens']:,} "
              f"are reused from a stored prefix and {r['computed_tokens']:,} computed; the forward passes filled "
              f"{r['batch_slots']:,} batch slots, so {100 * padding:.0f}% of the slots were padding."]
    return "\n".join(lines) + "\n"


def _recording(src: Any, folder: str) -> dict[str, Any]:
    """The recording a run replayed, from its report and evolve.json: its items, the test items per suite (the
    zero-shot suite apart), and the training and validation items of the kept mean."""
    text = src.path(f"{folder}/report.md").read_text()
    fit = src.json(f"{folder}/evolve.json")["kept_mean_fit"]
    zero = re.search(r"^Zero-shot transfer \((\w+): never trained on\), (\d+) test items", text, re.M)
    return {"items": int(re.search(r"replayed from the recording `[^`]+` \((\d+) items;", text)[1]),
            "test": int(re.search(r"On (\d+) paired test items", text)[1]),
            "suites": {m[0]: int(m[1]) for m in re.findall(r"^- (\w+), n = (\d+):", text, re.M)},
            "zero_shot": (zero[1], int(zero[2])) if zero else None,
            "train": fit["train_items"], "validation": fit["validation_items"]}


def _test_split(rec: dict[str, Any]) -> str:
    """`10 per suite, gpqa_diamond the zero-shot one`, or `gsm8k, humaneval and mmlu 5 each, and the zero-shot
    gpqa_diamond 4`."""
    counts = set(rec["suites"].values())
    zero = rec["zero_shot"]
    if zero and counts == {zero[1]}:
        return f"{zero[1]} per suite, {zero[0]} the zero-shot one"
    if len(counts) == 1:
        text = f"{_and(sorted(rec['suites']))} {counts.pop()} each"
    else:
        text = ", ".join(f"{name} {n}" for name, n in sorted(rec["suites"].items()))
    return text + (f", and the zero-shot {zero[0]} {zero[1]}" if zero else "")


def at_96_items(src: Any) -> str:
    """The recording the run with shipped states replayed, split by split."""
    folder = f"{FOLDER}/at_96_items"
    if not src.path(f"{folder}/report.md").is_file() or not src.json(f"{folder}/evolve.json"):
        return _missing("at_96_items/")
    rec = _recording(src, folder)
    return (f"The recording: {rec['items']} items (test {rec['test']}: {_test_split(rec)}; validation "
            f"{rec['validation']}; train {rec['train']}). Files: `at_96_items/` (the report as written and its "
            "metrics).\n")


def first_run_items(src: Any) -> str:
    """The recording the first run replayed, and what its ablations.json says of the validation budget."""
    if not src.path(f"{FOLDER}/report.md").is_file() or not src.json(f"{FOLDER}/evolve.json"):
        return _missing("report.md")
    rec = _recording(src, FOLDER)
    text = (f"The recording had **{rec['items']} items**: test {rec['test']} ({_test_split(rec)}), train "
            f"{rec['train']}, validation {rec['validation']}.")
    budget = src.json(f"{FOLDER}/ablations.json").get("budget") or {}
    if budget.get("validation_items", rec["validation"]) != rec["validation"]:
        text += (f" Its `ablations.json` says `validation_items: {budget['validation_items']}` and "
                 f"{budget['validation_episodes']:,} validation episodes: the configured cap, not the "
                 f"{rec['validation']} items there were (the budget counts the items there are).")
    return text + "\n"


def threads_lessons(src: Any) -> str:
    """What the thread counts say: two threads alone, one beside another CPU-bound process."""
    ratios = []
    for file, _ in THREADS:
        path = src.path(f"{FOLDER}/{file}")
        if not path.is_file():
            return _missing(file)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        ratios.append((next(r["wall_ratio_to_first"] for r in rows if "wall_ratio_to_first" in r),
                       {r["threads"]: r for r in rows if "threads" in r}))
    (alone, alone_rows), (loaded, loaded_rows) = ratios
    one_alone, one_loaded = alone_rows["1"]["wall_s"], loaded_rows["1"]["wall_s"]
    same = abs(one_loaded / one_alone - 1) < 0.05
    return (f"- **Alone, two torch threads are right** ({alone['1'] / alone['2']:.2f}x one thread). **Beside another "
            f"CPU-bound process, pin one** ({loaded['2'] / loaded['1']:.2f}x faster than two there"
            + (", and as fast as one thread alone" if same else "") + "): two threads then spin against the other "
            "process's threads (the same reason `make test` pins one thread per worker). `OMP_NUM_THREADS=1 make "
            "run ...` is the way to run the pipeline beside a recorder; this run did not, which is why its "
            "cache_states was slow.\n")


def seeds_113_command(src: Any) -> str:
    """The 3-seed run's setting: its test items, its runs and their wall time."""
    res = src.json(f"{FOLDER}/ablations_3_seeds_113/results.json")
    if not res:
        return _missing("ablations_3_seeds_113/results.json")
    items = re.search(r"\((\d+) items", res["recording"])[1]
    return (f"Command, on the recording at {items} items, in a fresh clone after its `make run` ({res['test_items']} "
            f"test items; one torch thread, beside the recorder; {res['wall_s']:.0f} s for the {len(res['rows'])} "
            "runs):\n")


REGIONS = {"local-agents-interim-seeds-113": seeds_113, "local-agents-interim-seeds-113-command": seeds_113_command,
           "local-agents-interim-at-96-items": at_96_items, "local-agents-interim-first-run-items": first_run_items,
           "local-agents-interim-threads-lessons": threads_lessons, "local-agents-interim-at-96": at_96,
           "local-agents-interim-first-run": first_run, "local-agents-interim-threads": threads}
