"""The cache_states stage: first-turn coordinator features of every prepared question.

The first turn's transcript is the shared message before any reference thought (task prompt +
collaboration instructions), built by the protocol's own SharedMessage so it is exactly what the
router reads at turn 0. Written per suite to `data/states/<suite>.safetensors` (on GPU when present).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig

from trinity.episodes.protocol import SharedMessage
from trinity.episodes.protocol_config import ProtocolConfig
from trinity.pipeline import items as item_sel

log = logging.getLogger("trinity.cache_states")


def first_turn_transcript(protocol: ProtocolConfig, prompt: str) -> str:
    return SharedMessage(prompt, protocol.collaboration_instructions, protocol.thought_format).text


def run(cfg: DictConfig) -> dict:
    from trinity.coordinator.coordinator import Coordinator
    from trinity.coordinator.states import write_state_cache

    protocol = ProtocolConfig.from_cfg(cfg.protocol)
    coord = Coordinator.from_config(cfg)
    out_dir = Path(cfg.paths.states)
    out_dir.mkdir(parents=True, exist_ok=True)
    suites = list(dict.fromkeys(list(cfg.tasks.train) + list(cfg.tasks.transfer)))
    counts = {}
    for suite in suites:
        items = []
        for split in ("train", "validation", "test"):
            items += item_sel.load_split(cfg, [suite], split)
        pairs = [(it.uid, first_turn_transcript(protocol, it.prompt)) for it in items]
        write_state_cache(coord, pairs, out_dir / f"{suite}.safetensors")
        counts[suite] = len(pairs)
        log.info("cache_states: %s: %d first-turn features", suite, len(pairs))
    manifest = {"backbone": cfg.coordinator.backbone.id, "token_position": cfg.coordinator.token_position,
                "hidden_size": coord.hidden_size, "counts": counts}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return {"path": str(out_dir), "count": sum(counts.values()), **manifest}
