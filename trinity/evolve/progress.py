"""The per-generation progress report: a dict for callers (Prefect artifacts) and one terminal line."""

from __future__ import annotations

from typing import Any, Sequence


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def progress_report(run: dict[str, Any], generations: int, walls: Sequence[float], elapsed_s: float) -> dict[str, Any]:
    """`generation` is the 0-based index just finished (as in the tables), `generations_done` the count.

    `walls` are the wall times of the generations run in this process (the ETA ignores earlier ones)."""
    rows = run["episode_rows"]
    gen = run["generation_rows"][-1]
    done = run["next_generation"]
    calls = sum(r["calls"] for r in rows)
    hits = sum(r["cache_hits"] for r in rows)
    cost = float(sum(r["cost_usd"] for r in rows))
    remaining = 0 if run["finished"] else max(generations - done, 0)
    eta = (sum(walls) / len(walls)) * remaining if walls else None
    best = run["best"] or {}
    report = {
        "event": "generation", "generation": gen["generation"], "generations_done": done,
        "generations": generations, "episodes_done": len(rows), "calls": calls,
        "cache_hits": hits, "cache_hit_share": hits / calls if calls else 0.0, "cost_usd": cost,
        "tokens": sum(r["tokens"] for r in rows), "fitness_mean": gen["fitness_mean"],
        "fitness_max": gen["fitness_max"], "validation_reward": gen["validation_reward"],
        "best_validation_reward": best.get("validation_reward"), "sigma": gen["sigma"],
        "wall_s": gen["wall_s"], "elapsed_s": elapsed_s, "eta_s": eta, "stop_reason": run["stop_reason"],
    }
    val = "" if gen["validation_reward"] is None else f" | val {gen['validation_reward']:.3f}"
    report["line"] = (
        f"evolve gen {done}/{generations} | episodes {len(rows)} | calls {calls} | "
        f"cache {report['cache_hit_share']:.1%} | cost ${cost:.4f} | "
        f"fitness mean {gen['fitness_mean']:.3f} max {gen['fitness_max']:.3f}{val} | ETA {_duration(eta)}"
    )
    return report
