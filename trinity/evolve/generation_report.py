"""The per-generation progress report: a dict for callers (Prefect artifacts) and one terminal line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.evolve.diagnostics import x0_comparison
from trinity.evolve.rows import GenerationRow
from trinity.evolve.run_state import RunState

# The pool work of a step and how close it ran to its floor (generation rows and x0's record).
WORK_KEYS = ("decode_tokens", "prefill_tokens", "floor_s", "floor_bound", "efficiency")


def hms(seconds: float) -> tuple[int, int, int]:
    """Whole hours, minutes and seconds of a duration (rounded to the second)."""
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return h, m, s


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    h, m, s = hms(seconds)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _totals(episodes: dict[str, Any]) -> dict[str, Any]:
    """The report's names for the committed episodes' totals (trinity.evolve.outputs.totals)."""
    return {"episodes_done": episodes["episodes"], "calls": episodes["calls"], "cache_hits": episodes["cache_hits"],
            "cache_hit_share": episodes["cache_hit_share"], "cost_usd": episodes["cost_usd"],
            "tokens": episodes["tokens"]}


def _floor(row: dict[str, Any]) -> str:
    """' | work dec 1200 pre 5400 tok | floor 41.0s (qwen-coder-1.5b) eff 63%': the pool work done and how
    close the step ran to the least time it could take (trinity.evolve.efficiency)."""
    work = f" | work dec {row.get('decode_tokens') or 0} pre {row.get('prefill_tokens') or 0} tok"
    floor = row.get("floor_s")
    if floor is None and not (row.get("decode_tokens") or row.get("prefill_tokens")):
        return " | no pool call (replayed or cached)"
    if floor is None:
        return f"{work} | floor ? (no pool throughput configured)"
    eff = row.get("efficiency")
    return f"{work} | floor {floor:.1f}s ({row.get('floor_bound')}) eff {'?' if eff is None else f'{eff:.0%}'}"


def _versus_x0(versus: dict[str, Any], validated_after_x0: bool) -> str:
    """x0's reward, and plainly whether a later validation beat it."""
    x0 = versus["x0_validation_reward"]
    if x0 is None:
        return ""
    if versus["beats_x0"]:
        return f" | best {versus['best_minus_x0']:+.3f} over x0 {x0:.3f}"
    return f" | x0 {x0:.3f} NOT BEATEN" if validated_after_x0 else f" | x0 {x0:.3f}"


def _modes(selection: str, rewards: dict[str, Any]) -> str:
    """' sample 0.312 argmax 0.500', the selecting mode first."""
    other = "argmax" if selection == "sample" else "sample"
    return "".join(f" {m} {rewards[f'validation_reward_{m}']:.3f}" for m in (selection, other))


def x0_report(run: RunState, episodes: dict[str, Any], generations: int, elapsed_s: float) -> dict[str, Any]:
    """The report of x0's validation (generation -1, before generation 0); `episodes`: the committed
    episodes' totals (trinity.evolve.outputs.totals)."""
    x0 = run.x0
    assert x0 is not None  # reported once x0's validation is committed
    totals = _totals(episodes)
    work = {k: getattr(x0, k) for k in WORK_KEYS}
    report = {
        "event": "x0", "generation": -1, "generations_done": 0, "generations": generations, **totals,
        "validation_reward": x0.validation_reward, "validation_reward_sample": x0.validation_reward_sample,
        "validation_reward_argmax": x0.validation_reward_argmax, "x0_validation_reward": x0.validation_reward,
        "validation_routing": run.validation_routing, "wall_s": x0.wall_s, "elapsed_s": elapsed_s,
        "stop_reason": run.stop_reason, **work,
    }
    rewards = {"validation_reward_sample": x0.validation_reward_sample,
               "validation_reward_argmax": x0.validation_reward_argmax}
    report["line"] = (
        f"evolve x0 (generation -1, the initial mean) | val{_modes(run.validation_routing, rewards)}: the baseline "
        f"of every later validation | episodes {totals['episodes_done']} | calls {totals['calls']} | "
        f"cost ${totals['cost_usd']:.4f}{_floor(work)}"
    )
    return report


def progress_report(run: RunState, episodes: dict[str, Any], generations: int, walls: Sequence[float],
                    elapsed_s: float) -> dict[str, Any]:
    """`generation` is the 0-based index just finished (as in the tables), `generations_done` the count.

    `episodes`: the committed episodes' totals (trinity.evolve.outputs.totals). `walls` are the wall times
    of the generations run in this process (the ETA ignores earlier ones)."""
    gen = run.generation_rows[-1]
    done = run.next_generation
    totals = _totals(episodes)
    remaining = 0 if run.finished else max(generations - done, 0)
    eta = (sum(walls) / len(walls)) * remaining if walls else None
    versus = x0_comparison(run)
    work = {k: getattr(gen, k) for k in WORK_KEYS}
    report = {
        "event": "generation", "generation": gen.generation, "generations_done": done,
        "generations": generations, **totals, "fitness_mean": gen.fitness_mean,
        "fitness_max": gen.fitness_max, "validation_reward": gen.validation_reward,
        "validation_reward_sample": gen.validation_reward_sample,
        "validation_reward_argmax": gen.validation_reward_argmax,
        "best_validation_reward": None if run.best is None else run.best.validation_reward, **versus,
        "sigma": gen.sigma, "learning_rate": gen.learning_rate,
        "mean_norm": gen.mean_norm, "verifier_first_share": gen.verifier_first_share,
        "no_answer_share": gen.no_answer_share, "truncated_call_share": gen.truncated_call_share,
        "reward_mean": gen.reward_mean, "agent_entropy": gen.agent_entropy,
        "turn_term_mean": gen.turn_term_mean, "cost_term_mean": gen.cost_term_mean,
        "wall_s": gen.wall_s, "elapsed_s": elapsed_s, "eta_s": eta, "stop_reason": run.stop_reason, **work,
    }
    rewards = {"validation_reward_sample": gen.validation_reward_sample,
               "validation_reward_argmax": gen.validation_reward_argmax}
    val = "" if gen.validation_reward is None else f" | val{_modes(run.validation_routing, rewards)}"
    validated_after_x0 = any(r.validation_reward is not None for r in run.generation_rows)
    report["line"] = (
        f"evolve gen {done}/{generations} | episodes {totals['episodes_done']} | calls {totals['calls']} | "
        f"cache {totals['cache_hit_share']:.1%} | cost ${totals['cost_usd']:.4f} | "
        f"fitness mean {gen.fitness_mean:.3f} max {gen.fitness_max:.3f} | "
        f"verifier-first {gen.verifier_first_share:.0%} no-answer {gen.no_answer_share:.0%} "
        f"truncated {gen.truncated_call_share:.0%} | {_step_size(gen)} |mean| {gen.mean_norm:.3g}"
        f"{val}{_versus_x0(versus, validated_after_x0)}{_floor(work)} | ETA {_duration(eta)}"
    )
    return report


def _step_size(gen: GenerationRow) -> str:
    """A black-box strategy's sigma, or an on-policy method's learning rate (the other one is null)."""
    if gen.sigma is None and gen.learning_rate is not None:
        return f"lr {gen.learning_rate:.3g}"
    return f"sigma {gen.sigma:.3g}"
