"""`trinity record --states`: compute the coordinator's states of every recorded item and ship them with the
recording (trinity.pipeline.shipped_states), so a run on the recording reads them instead of running the
backbone in its cache_states stage.

Per item: the first turn's transcript and every later transcript of the item's recorded tree, at every token
position the configured run reads (the coordinator's and an enabled ablation's), computed as the stage
computes them (the item alone, isolated). Append-only like the recording's parts: an item whose file already
holds these transcripts is skipped, so a rerun after new parts computes only the new items, and a killed run
loses only the item in flight. Run it with the experiment that replays the recording
(`trinity record --states experiment=local_agents`): the coordinator section decides the identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trinity.config import with_values
from trinity.config_schema import TrinityConfig
from trinity.errors import TrinityError
from trinity.pipeline import record_stage
from trinity.record import store


def run(cfg: TrinityConfig, *, progress: Callable[[str], None] = print,
        limit_items: int | None = None) -> dict[str, Any]:
    """Write the missing items' states; returns {folder, items, written, present, missing_items, seconds}."""
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pipeline.cache_states_stage import by_suite_items, recorded_item_texts, token_positions
    from trinity.pipeline.recorded import replay_path
    from trinity.pipeline.shipped_states import ShippedStates
    from trinity.pipeline.state_files import features_at_positions

    root = replay_path(cfg)
    if root is None:
        raise TrinityError("`trinity record --states` computes the states a run on a recording reads: use the "
                           "experiment that replays it (e.g. experiment=local_agents, or pool=recorded with "
                           "pool.replay.recording set)")
    manifest = store.read_manifest(root)
    recorded = [e["uid"] for e in manifest.get("items", [])]
    suites = list(dict.fromkeys(list(cfg.tasks.train) + list(cfg.tasks.transfer)))
    # the items the recorder recorded from (record_stage.with_own_items); where that folder lacks some of
    # them (the prepare stage has not run here), the tasks section prepared into this recording's own folder
    cfg = record_stage.with_own_items(cfg, progress)
    try:
        items = by_suite_items(cfg, suites)
    except TrinityError:   # no prepared suite file there
        items = []
    if cfg.record.prepared is None and len(items) < len(recorded):
        own = Path(cfg.paths.cache) / "record" / root.name / "prepared"
        cfg = record_stage.with_own_items(with_values(cfg, {"record.prepared": str(own)}, resolved=True), progress)
        items = by_suite_items(cfg, suites)
    found = {it.uid for it in items}
    missing = [uid for uid in recorded if uid not in found]
    if missing:
        progress(f"record --states: {len(missing)} recorded item(s) are not among the configured suites' prepared "
                 f"items (e.g. {missing[0]}); their states are not written")
    parts = {e["uid"]: Path(e["part"]).stem for e in manifest.get("items", [])}
    order = {uid: i for i, uid in enumerate(parts)}
    items.sort(key=lambda it: order.get(it.uid, len(order)))    # the recording's order: part by part
    coord = coordinator_from_config(cfg)
    positions = token_positions(cfg)
    shipped = ShippedStates(root, coord)
    texts = recorded_item_texts(cfg, items) or {}
    lacking = [it for it in items if shipped.get(it.uid, texts[it.uid], positions) is None]
    todo = lacking if limit_items is None else lacking[: int(limit_items)]
    progress(f"record --states: {shipped.folder}: {len(items) - len(lacking)} of {len(items)} items present, "
             f"{len(lacking)} lacking, {len(todo)} to compute now at token position(s) "
             f"{', '.join(str(p) for p in positions)}")
    start = time.monotonic()
    for n, item in enumerate(todo, 1):
        t0 = time.monotonic()
        features = features_at_positions(coord, texts[item.uid], positions)
        shipped.put(item.uid, parts[item.uid], features)
        progress(f"record --states: {n}/{len(todo)} {item.uid}: {len(texts[item.uid])} transcripts in "
                 f"{time.monotonic() - t0:.1f}s")
    return {"folder": str(shipped.folder), "items": len(items), "written": len(todo),
            "present": len(items) - len(lacking) + len(todo), "missing_items": len(missing),
            "seconds": round(time.monotonic() - start, 1)}

