"""What `trinity record` will cost before it starts."""

from __future__ import annotations

from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.plan.assumptions import Assumptions
from trinity.plan.build import figures
from trinity.plan.suites import suite_infos
from trinity.plan.tokens import suite_tokens
from trinity.plan.usage import Usage, wall_s


def recording_plan(cfg: TrinityConfig, assumptions: Assumptions | None = None, *, thinker_valid: float = 0.0
                   ) -> dict[str, Any]:
    """What `trinity record` will cost before it starts: calls, tokens, dollars and wall time of the items
    still to record, from the tree's branching (trinity.record.tree.tree_size: every (model, role) at every
    turn) and the same token model as the pipeline's plan. Requests that paths share are counted once where
    the protocol makes them the same (tree_size(shared=True): agents' alike Verifier requests, the turns after
    a rejection); `measured` gives the recording's own figures so far when it has some."""
    from trinity.pipeline import record_stage
    from trinity.record import store
    from trinity.record.tree import tree_size

    a = assumptions or Assumptions()
    cfg = record_stage.live_config(cfg)
    notes: set[str] = set()
    settings = record_stage.tree_settings(cfg)
    agents = list(settings.agents)
    root = record_stage.recording_dir(cfg)
    done = set(store.item_entries(store.read_manifest(root))) if (root / store.MANIFEST).exists() else set()
    items = record_stage.chosen_items(record_stage.with_own_items(cfg))
    pending = [it for it in items if it.uid not in done]
    stale = record_stage.stale_items(cfg)   # recorded with other agent setups: only their new calls are made
    per_role = tree_size(settings, thinker_valid=thinker_valid, accept=a.accept, shared=True)
    first = {r: (0.0 if r == "verifier" else len(agents) * settings.samples) for r in settings.roles}
    infos = suite_infos(cfg, sorted({it.suite for it in items}))
    scenarios = {"typical": a.output_fraction, "at_cap": 1.0}
    usage = {s: Usage() for s in scenarios}
    for it in pending:
        tk = suite_tokens(cfg, infos[it.suite], agents, notes)
        for s, fraction in scenarios.items():
            u = Usage(episodes=1.0)
            for role, n in per_role.items():
                if not n:
                    continue
                later = n - first.get(role, 0.0)   # calls after the first turn read one earlier answer or thought
                for m in agents:
                    reply = fraction * tk.caps[("worker", m)]
                    u.call(m, n / len(agents), n / len(agents) * tk.base[role] + later / len(agents) * reply,
                           n / len(agents) * fraction * tk.caps[(role, m)])
            usage[s].add(u)
    walls = {s: wall_s(usage[s], cfg)[0] for s in scenarios}
    measured = None
    if done:
        rec = store.open_recording(root, verify=False)
        summary = store.summarise(rec)
        measured = {**summary, "wall_s_per_item": summary["wall_s"] / max(summary["items"], 1),
                    "calls_per_item": summary["calls"] / max(summary["items"], 1)}
    return {"recording": str(root), "items": len(items), "recorded": len(items) - len(pending),
            "pending": len(pending), "stale": len(stale), "stale_new_calls": record_stage.new_calls_of(cfg, stale),
            "max_turns": settings.max_turns, "roles": list(settings.roles),
            "samples": settings.samples, "thinker_valid_assumed": thinker_valid,
            "calls_per_item": sum(per_role.values()), "calls_per_item_by_role": per_role,
            **{s: {**figures(usage[s], cfg), "calls": usage[s].total_calls, "wall_s": walls[s]} for s in scenarios},
            "measured": measured, "notes": sorted(notes)}
