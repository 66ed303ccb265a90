"""docs/LOCAL_DEFAULT.md: the live local pool's measurements in docs/benchmarks/local_pool/ (throughput.txt of
`benchmarks/local_pool_throughput.py`, the reply_lengths_*.jsonl of `benchmarks/reply_lengths.py`) and the
measured `make run` in docs/benchmarks/local_small_make_run/ (evolve.json, generations.csv); the physical ceiling of
the live budget from both pool files."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

POOL = "docs/benchmarks/local_pool"
RUN = "docs/benchmarks/local_small_make_run"
STRONGEST = "qwen-coder-1.5b"
SUITES = {"mmlu": "MMLU", "gsm8k": "GSM8K", "humaneval": "HumanEval"}
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 8: "eight"}
LIVE_BUDGET_S = 20 * 60   # the live budget's target (conf/experiment/local_live.yaml: about 20 minutes)
SHARES = {1 / 3: "a third", 1 / 2: "a half", 2 / 3: "two thirds"}


def _lines(src: Any, rel: str) -> list[dict[str, Any]]:
    path = src.path(rel)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def _short(model: str) -> str:
    """`qwen-coder-1.5b` -> `1.5B`: the models' sizes name them in the prose."""
    return model.rsplit("-", 1)[-1].upper()


def _slots(layout: str) -> list[int]:
    return [int(part.split("x")[1]) for part in layout.split("/")]


def _layout(layout: str, models: list[str]) -> str:
    """`1x4/1x4/1x4` -> `four slots each`, `1x8/1x4/1x4` -> `the 1.5B with eight slots`."""
    slots = _slots(layout)
    if len(set(slots)) == 1:
        return f"{WORDS.get(slots[0], slots[0])} slots each"
    odd = next(i for i, s in enumerate(slots) if slots.count(s) == 1)
    return f"the {_short(models[odd])} with {WORDS.get(slots[odd], slots[odd])} slots"


def throughput(src: Any) -> str:
    """Pool decode per layout and each model's decode and prefill under the best layout."""
    found = _lines(src, f"{POOL}/throughput.txt")
    if not found:
        return ("Not measured yet (`python benchmarks/local_pool_throughput.py --requests 8 --max-tokens 96`, its "
                f"output in {POOL}/throughput.txt).\n")
    res = found[0]
    models, layouts, best = res["models"], res["layouts"], res["best"]
    shorthand = [lay.split("/")[0] if len(set(lay.split("/"))) == 1 else lay for lay in layouts]
    threads = int(best.split("/")[0].split("x")[0])
    others = [f"{_layout(lay, models)}: {v['pool_decode_tok_per_s']:.1f}" for lay, v in layouts.items() if lay != best]
    per = layouts[best]["models"]

    def rates(phase: str) -> str:
        return " / ".join(f"{per[m][phase]['tok_per_s']:.1f}" for m in models)

    text = (f"**What the pool can do.** `benchmarks/local_pool_throughput.py --requests {res['requests_per_model']} "
            f"--max-tokens {res['max_tokens']} --layouts \"{','.join(shorthand)}\"` (threads x slots per server, "
            f"all {WORDS.get(len(models), len(models))} models loaded at once): pool decode "
            f"{layouts[best]['pool_decode_tok_per_s']:.1f} tok/s with {WORDS.get(threads, threads)} thread and "
            f"{_layout(best, models)}"
            + (f" ({', '.join(others)})" if others else "")
            + f"; per model under that full load, decode {rates('decode')} tok/s and prompt processing (prefill) "
            f"{rates('prefill')} tok/s for the {' / '.join(_short(m) for m in models)}. These are "
            "`pool.models.<m>.throughput` in conf/pool/local.yaml.")
    first = models[0]
    more = [lay for lay in layouts if _slots(lay)[0] > _slots(best)[0]]
    if more and all(layouts[lay]["models"][first]["decode"]["tok_per_s"] < per[first]["decode"]["tok_per_s"]
                    for lay in more):
        text += f" The {_short(first)} is compute-bound on its one core: more slots only queue."
    return text + "\n"


def _half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _share(x: float) -> str:
    return next((words for value, words in SHARES.items() if abs(x - value) < 0.01), f"{100 * x:.0f}%")


def reply_lengths(src: Any) -> str:
    """The strongest model's median Worker reply with the default and the brief prompt; SmolLM2's loops."""
    default = _lines(src, f"{POOL}/reply_lengths_default_prompt.jsonl")
    brief = _lines(src, f"{POOL}/reply_lengths_brief_prompt.jsonl")
    if not default or not brief:
        return ("Not measured yet (`python benchmarks/reply_lengths.py --items 6 --review 2 --max-tokens 512 "
                f"experiment=local_small`, one line each in {POOL}/reply_lengths_*.jsonl).\n")
    summary = next(r for r in default if r.get("benchmark") == "reply_lengths")
    review = max((r["n"] for r in default if r.get("role") == "verifier"), default=0)

    def medians(rows: list[dict[str, Any]]) -> list[int]:
        return [_half_up(r["p50"]) for s in SUITES for r in rows
                if r.get("role") == "worker" and r["suite"] == s and r["model"] == STRONGEST]

    mine = medians(default)
    loops = [(s, r["length_at_limit"]) for s in SUITES for r in brief
             if r.get("role") == "worker" and r["suite"] == s and r["model"].startswith("smollm2")]
    shares = sorted(x for _, x in loops)
    text = (f"**How long the answers are.** `benchmarks/reply_lengths.py --items {summary['items_per_suite']} "
            f"--review {review} --max-tokens {summary['max_tokens']}` ({summary['items_per_suite']} training items "
            f"per suite, every model, no cap in the way): with the default Worker prompt the {_short(STRONGEST)}'s "
            f"median Worker reply is {mine[0]} tokens on {SUITES['mmlu']}, "
            + ", ".join(f"{n} on {name}" for n, name in zip(mine[1:], list(SUITES.values())[1:], strict=True))
            + ". local_small's briefer Worker prompt (`protocol.worker_system`: \"Be brief ...\") brings that to "
            + ", ".join(str(n) for n in medians(brief)[:-1]) + f" and {medians(brief)[-1]}.")
    if loops:
        text += (f" With it SmolLM2-135M loops until any cap on {_share(shares[0])} to {_share(shares[-1])} of the "
                 f"items (at {summary['max_tokens']} tokens: "
                 + ", ".join(f"{SUITES[s]} {100 * x:.0f}%" for s, x in loops) + ").")
    return text + "\n"


def generations(src: Any) -> str:
    """The measured run's median efficiency and the response cache's share of each generation's calls."""
    evolve = src.json(f"{RUN}/evolve.json")
    path = src.path(f"{RUN}/generations.csv")
    if not evolve or not path.is_file():
        return f"Not measured yet (`make run EXPERIMENT=local_live`, its metrics copied to {RUN}/).\n"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    shares = [f"{100 * float(r['cache_hit_share']):.0f}%" for r in rows]
    first, last = rows[0]["generation"], rows[-1]["generation"]
    return (f"The generations' median efficiency is {evolve['median_efficiency']:.2f} (`median_efficiency` in the "
            f"committed `{RUN}/evolve.json`). The response cache served "
            + ", ".join(shares[:-1]) + f" and {shares[-1]} of the calls of generations {first}-{last} "
            f"(`cache_hit_share` in the committed `{RUN}/generations.csv`; the last one includes the final "
            "validation's new items).\n")


def ceiling(src: Any) -> str:
    """What one Worker answer of the strongest model costs its server: its median brief reply (the mean of the
    per-suite medians) at the loaded decode rate, and how many such answers the live budget's minutes hold."""
    found = _lines(src, f"{POOL}/throughput.txt")
    brief = _lines(src, f"{POOL}/reply_lengths_brief_prompt.jsonl")
    medians = [r["p50"] for r in brief if r.get("role") == "worker" and r.get("model") == STRONGEST]
    if not found or not medians:
        return ("Not measured yet (`python benchmarks/local_pool_throughput.py` and "
                f"`python benchmarks/reply_lengths.py`, their output in {POOL}/).\n")
    res = found[0]
    decode = res["layouts"][res["best"]]["models"][STRONGEST]["decode"]["tok_per_s"]
    reply = sum(medians) / len(medians)
    seconds = reply / decode
    return (f"**The physical ceiling.** One Worker answer of the {_short(STRONGEST)}, at its median brief reply "
            f"(about {_half_up(reply)} tokens, the mean over the suites above), takes about {_half_up(seconds)} s of "
            f"its server to decode at the loaded rate ({decode:.1f} tok/s), before its prompt is read. So in "
            f"{LIVE_BUDGET_S // 60} minutes, training and evaluation together, the {_short(STRONGEST)} fits at most "
            f"about {math.floor(LIVE_BUDGET_S / seconds)} answers, and fewer once their prompts are read.\n")


REGIONS = {"local-default-throughput": throughput, "local-default-reply-lengths": reply_lengths,
           "local-default-generations": generations, "local-default-ceiling": ceiling}
