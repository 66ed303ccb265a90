"""A small recording made by the real recorder through the real PoolClient, over a loopback stub server
whose replies are a deterministic function of the request: what the recording tests share.

Replies: a Worker answers "The answer is \\boxed{N}" with N from a hash of (model, messages), right for
some (item, model) pairs; a Verifier says ACCEPT or REJECT from the same hash; a Thinker gives a valid
suggestion for one model and an invalid reply for the others. The grader rewards the item's answer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl
from pool_stub import StubServer, completion, stub_pool_mapping

from trinity.config import compose, load, with_values

MODELS = ("m-big", "m-mid", "m-small")
SUITE = "gsm8k"


def _h(*parts: Any) -> int:
    return int(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8], 16)


def reply_for(body: dict) -> Any:
    model = body["model"]
    messages = body["messages"]
    system = messages[0]["content"]
    user = messages[-1]["content"]
    h = _h(model, messages)
    if system.startswith("You are the Worker"):
        skill = {"m-big-id": 3, "m-mid-id": 2, "m-small-id": 1}[model]
        right = h % 4 < skill
        answer = 7 if right else h % 5 + 10
        return completion(f"Work. The answer is \\boxed{{{answer}}}. <idea>try {answer} ({h % 97})</idea>",
                          prompt_tokens=len(user) // 4, completion_tokens=20 + h % 30)
    if system.startswith("You are the Thinker"):
        if model == "m-big-id":
            role = "worker" if h % 2 else "verifier"
            return completion(f"<suggestion>check step {h % 9}</suggestion><suggested_role>{role}</suggested_role>",
                              prompt_tokens=len(user) // 4, completion_tokens=12)
        return completion("I think it is fine.", prompt_tokens=len(user) // 4, completion_tokens=6)
    verdict = "ACCEPT" if ("boxed{7}" in user and h % 3) or h % 5 == 0 else "REJECT: no"
    return completion(verdict, prompt_tokens=len(user) // 4, completion_tokens=2)


def write_prepared(folder: Path, n: dict[str, int]) -> None:
    """A gsm8k suite file with n[split] items per split, every answer 7."""
    rows = []
    for split, count in n.items():
        for i in range(count):
            rows.append({"item_id": f"{split}-{i:03d}", "split": split,
                         "prompt": f"Question {split} {i}: what is 3 + 4? Put the answer in \\boxed{{}}.",
                         "reference": json.dumps({"answer": "7"}), "meta": "{}", "source": "test", "version": "1"})
    folder.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows).write_parquet(folder / f"{SUITE}.parquet")


async def grade(item, answer: str) -> float:
    return 1.0 if "boxed{7}" in answer else 0.0


def recording_cfg(tmp: Path, base_url: str, *, roles=("worker", "thinker", "verifier"), max_turns: int = 2,
                  items: dict | None = None, samples: int = 1, overrides: tuple[str, ...] = ()) -> Any:
    cfg = load(None, ["experiment=local_small", f"protocol.max_turns={max_turns}", f"tasks.train=[{SUITE}]",
                      "tasks.transfer=[]", *overrides])
    items = items or {"train": 3, "validation": 2, "test": 2}
    return with_values(cfg, {"pool": stub_pool_mapping(base_url, models=list(MODELS)),
                             "paths.prepared": str(tmp / "prepared"), "paths.cache": str(tmp / "cache"),
                             "record.dir": str(tmp / "recordings"), "record.name": "toy", "record.roles": list(roles),
                             "record.samples": samples, "record.items": items})


def make_recording(tmp: Path, **kw: Any) -> tuple[Any, Path, StubServer]:
    """Record the toy items; returns (cfg, recording folder, the stopped server with its request log)."""
    from trinity.pipeline import record_stage
    from trinity.pool.client import PoolClient

    write_prepared(tmp / "prepared", {"train": 4, "validation": 3, "test": 3})
    with StubServer(reply_for) as server:
        cfg = recording_cfg(tmp, server.base_url, **kw)
        record_stage.run(cfg, progress=lambda _l: None, grader=grade,
                         client_factory=lambda journal, known: PoolClient.from_config(cfg.pool, cache_path=journal,
                                                                                replay=known))
    return cfg, record_stage.recording_dir(cfg), server


def redo_world(max_turns: int = 3, rejection_note: str | None = None) -> tuple[Any, Any]:
    """A verify-then-redo world for exact fitness: item 1's first answer is right and any answer built on a
    reference thought wrong, item 2 the other way round; the Verifier accepts exactly the right answers. Returns
    (protocol, compiled items) for one agent "a" with roles worker and verifier."""
    from trinity.config_schema.protocol import ProtocolConfig
    from trinity.record.exact import Recorded, compile_items
    from trinity.tasks.types import TaskItem

    overrides = ["experiment=local_small", f"protocol.max_turns={max_turns}"]
    if rejection_note:
        overrides.append(f"protocol.rejection_note='{rejection_note}'")
    protocol = ProtocolConfig.from_config(compose(overrides).protocol)
    items = [TaskItem("gsm8k", "q1", "What is 3 + 4?", "7"), TaskItem("gsm8k", "q2", "What is 2 + 5?", "7")]

    def lookup(model, role, item, messages, _sample, _context=None):
        if role == "worker":
            built_on_a_thought = "Reference thought" in messages[-1]["content"]
            right = built_on_a_thought == (item.item_id == "q2")
            return Recorded(f"{'7' if right else '8'} <idea>idea</idea>", True, float(right), 0.0, 10)
        right = "Current answer:\n7" in messages[-1]["content"]
        return Recorded("ACCEPT" if right else "REJECT: wrong", True, None, 0.0, 2)

    return protocol, compile_items(items, protocol, ("a",), ("worker", "verifier"), lookup)
