"""The plan as the table `trinity plan` prints, and a recording's plan as `trinity record --plan` prints it."""

from __future__ import annotations

import math
from typing import Any


def fmt_count(x: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= limit:
            return f"{x / limit:.1f}{suffix}"
    return f"{x:.0f}"


def fmt_usd(x: float) -> str:
    if x >= 100:
        return f"${x:,.0f}"
    if x >= 1 or x <= 0:
        return f"${x:.2f}"
    return f"${x:.{max(2, 1 - math.floor(math.log10(x)))}f}"   # two significant digits


def fmt_duration(seconds: float | None) -> str:
    from trinity.evolve.generation_report import hms

    if seconds is None:
        return "unknown"
    h, m, s = hms(seconds)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{s} s"


def _row(stage: str, part: str, detail: str, r: dict[str, Any]) -> list[str]:
    t, c = r["typical"], r["at_cap"]
    return [stage, part, detail, fmt_count(r["episodes"]), f"{fmt_count(r['calls'])} ({r['calls_per_episode']:.2f}/ep)",
            fmt_count(r["max_calls"]), f"{fmt_count(t['prompt_tokens'])} / {fmt_count(c['prompt_tokens'])}",
            f"{fmt_count(t['completion_tokens'])} / {fmt_count(c['completion_tokens'])}",
            f"{fmt_usd(t['cost_usd'])} / {fmt_usd(c['cost_usd'])}"]


def render_table(plan: dict[str, Any]) -> str:
    a = plan["assumptions"]
    head = ["stage", "part", "what", "episodes", "calls (expected)", "max calls", "prompt tok typ/cap",
            "completion tok typ/cap", "cost typ/cap"]
    rows = []
    for st in plan["stages"]:
        rows += [_row(st["stage"], p["part"], p["detail"], p) for p in st["parts"]]
        rows.append(_row(st["stage"], "= stage total", "", st["totals"]))
    rows.append(_row("TOTAL", "", "", plan["total"]))
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"plan: pool '{plan['pool']}' ({', '.join(plan['models'])}), K = {plan['max_turns']}, "
             f"popsize {plan['popsize']}",
             f"assumptions: {a['routing']}; P(ACCEPT) = {a['accept']}; P(Thinker suggests Worker) = "
             f"{a['suggest_worker']}; typical reply = {a['output_fraction']} x its output cap", ""]
    for r in [head] + rows:
        cells = enumerate(zip(r, widths, strict=True))
        lines.append("  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in cells))
    lines += [""] + _wall_lines(plan) + [""] + _suite_lines(plan) + ["notes:"] + [f"- {n}" for n in plan["notes"]]
    lines += [f"- {p['part']}: {p['note']}" for st in plan["stages"] for p in st["parts"] if p.get("note")]
    return "\n".join(lines) + "\n"


def _wall_lines(plan: dict[str, Any]) -> list[str]:
    total = plan["total"]
    if total["wall_unknown_models"]:
        return [f"wall time: unknown (no measured throughput for {', '.join(total['wall_unknown_models'])}; "
                "run benchmarks/local_pool_throughput.py)"]
    per_stage = ", ".join(f"{s['stage']} {fmt_duration(s['wall_s']['typical'])}" for s in plan["stages"])
    lines = ["wall time (estimate at the measured pool throughput, before the response cache and prompt-prefix reuse, "
             f"without queueing or start-up): {fmt_duration(total['wall_s']['typical'])} typical, "
             f"{fmt_duration(total['wall_s']['at_cap'])} at cap ({per_stage})"]
    if total["wall_no_prefill_models"]:
        lines.append(f"  prompt processing left out for {', '.join(total['wall_no_prefill_models'])} "
                     "(no throughput.prefill_tok_s)")
    return lines


def _suite_lines(plan: dict[str, Any]) -> list[str]:
    parts = [f"{s} {v['train']}/{v['validation']}/{v['test']} ~{v['prompt_tokens']} tok ({v['source']})"
             for s, v in plan["suites"].items()]
    return ["suites (train/validation/test items, prompt tokens): " + "; ".join(parts)]


def render_recording(plan: dict[str, Any]) -> str:
    t, c = plan["typical"], plan["at_cap"]
    lines = [f"recording {plan['recording']}: {plan['recorded']} of {plan['items']} items recorded, "
             f"{plan['pending']} to go (K = {plan['max_turns']}, roles {', '.join(plan['roles'])}, "
             f"{plan['samples']} sample(s) per call)",
             *([f"{plan['stale']} recorded item(s) have other agent setups now: expanding them again makes "
                f"{plan['stale_new_calls']} new call(s) (at least; the rest is in the recording)"]
               if plan.get("stale") else []),
             f"tree: {plan['calls_per_item']:.0f} calls per item (" + ", ".join(
                 f"{r} {n:.0f}" for r, n in plan["calls_per_item_by_role"].items() if n) + ")",
             f"to go: {fmt_count(t['calls'])} calls, {fmt_count(t['prompt_tokens'])} prompt + "
             f"{fmt_count(t['completion_tokens'])} completion tokens typical ({fmt_count(c['completion_tokens'])} at "
             f"cap), ${t['cost_usd']:.2f} typical (${c['cost_usd']:.2f} at cap)",
             f"wall time at the measured pool throughput: {fmt_duration(t['wall_s'])} typical, "
             f"{fmt_duration(c['wall_s'])} at cap"]
    m = plan.get("measured")
    if m:
        lines.append(f"measured so far: {m['items']} items, {m['calls']} calls ({m['calls_per_item']:.1f} per item), "
                     f"{m['prompt_tokens']} prompt + {m['completion_tokens']} completion tokens, "
                     f"{fmt_duration(m['wall_s'])} ({fmt_duration(m['wall_s_per_item'])} per item)")
    lines += [f"- {n}" for n in plan.get("notes", [])]
    return "\n".join(lines) + "\n"
