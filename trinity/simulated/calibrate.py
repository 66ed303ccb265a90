"""`trinity pool calibrate`: measure a real pool and write a simulated profile that plays it, so a user
can rehearse a training run over their own pool (cheaply, on the simulated pool) before paying for it.

Measured per pool model, with the protocol's own prompts, parsing and graders, on the validation split
of the training suites (`--items` per suite, never the test split):
- Worker: P(correct) per suite (one Worker turn), completion tokens per call;
- Verifier: P(ACCEPT | the answer is correct) and P(ACCEPT | wrong), judging every Worker answer above
  (every model's), so both rates come from the same answers;
- Thinker: P(a valid reply) and P(it suggests a Worker | valid).
A rate measured on no cases (e.g. no correct answer to judge) falls back to 0.5 and is listed in the
file's `measured` notes. Prices are copied from the measured pool's config.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from trinity.config_schema.pool import PoolConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import SharedMessage, read_reply, review_messages, sample_index_for, worker_messages


@dataclass
class Measured:
    worker: dict[str, list[float]]
    worker_tokens: list[int]
    verdicts: dict[bool, list[bool]]      # judged answer correct? -> accepted?
    verifier_tokens: list[int]
    thinker_valid: list[bool]
    thinker_worker: list[bool]
    thinker_tokens: list[int]


def _rate(values: list, fallback: float = 0.5) -> tuple[float, int]:
    return (float(np.mean(values)), len(values)) if values else (fallback, 0)


async def measure(pool, agents: list[str], items: list, protocol_cfg: Any, grader,
                  progress: Callable[[str], None] = print) -> dict[str, Measured]:
    """Run the calibration calls on `pool` (a ChatPool) and return the raw measurements per model."""
    cfg = ProtocolConfig.from_config(protocol_cfg)
    out = {a: Measured(defaultdict(list), [], {True: [], False: []}, [], [], [], []) for a in agents}

    async def work(agent: str, item):
        shared = SharedMessage(item.prompt, cfg.collaboration_instructions, cfg.thought_format)
        r = await pool.chat(agent, worker_messages(cfg, shared, None), sample_index=sample_index_for(item.uid, 0, 0),
                            max_tokens=cfg.max_tokens_for("worker", item.suite), temperature=cfg.temperature,
                            role="worker")
        if not r.ok:
            return None
        score = float(await grader(item, r.text))
        out[agent].worker[item.suite].append(score)
        out[agent].worker_tokens.append(r.completion_tokens)
        return item, r.text, score >= 1.0

    answers = [a for a in await asyncio.gather(*(work(m, it) for m in agents for it in items)) if a is not None]
    progress(f"calibrate: {len(answers)} Worker answers ({sum(c for _, _, c in answers)} correct)")

    async def verify(agent: str, item, answer: str, correct: bool):
        r = await pool.chat(agent, review_messages(cfg, "verifier", item.prompt, answer),
                            sample_index=sample_index_for(item.uid, 0, 1),
                            max_tokens=cfg.max_tokens_for("verifier", item.suite),
                            temperature=cfg.temperature, role="verifier")
        if r.ok:
            out[agent].verdicts[correct].append(read_reply("verifier", r.text).outcome == "accept")
            out[agent].verifier_tokens.append(r.completion_tokens)

    async def think(agent: str, item, answer: str):
        r = await pool.chat(agent, review_messages(cfg, "thinker", item.prompt, answer),
                            sample_index=sample_index_for(item.uid, 0, 2),
                            max_tokens=cfg.max_tokens_for("thinker", item.suite),
                            temperature=cfg.temperature, role="thinker")
        if r.ok:
            outcome = read_reply("thinker", r.text).outcome
            out[agent].thinker_valid.append(outcome != "no_advice")
            if outcome != "no_advice":
                out[agent].thinker_worker.append(outcome == "advise_worker")
            out[agent].thinker_tokens.append(r.completion_tokens)

    await asyncio.gather(*(verify(m, it, text, ok) for m in agents for it, text, ok in answers),
                         *(think(m, it, text) for m in agents for it, text, _ in answers[: max(1, len(items))]))
    return out


def profile_yaml(measured: dict[str, Measured], pool: PoolConfig, *, name: str = "calibrated", source: str = "") -> str:
    """The measurements as a profile file for conf/pool/profile/ (same model names as the measured pool)."""
    models, notes = {}, {}
    for agent, m in measured.items():
        worker = {suite: round(float(np.mean(v)), 4) for suite, v in sorted(m.worker.items())}
        ac, n_ac = _rate(m.verdicts[True])
        aw, n_aw = _rate(m.verdicts[False])
        valid, n_valid = _rate(m.thinker_valid)
        sw, n_sw = _rate(m.thinker_worker)
        prices = pool.models[agent]
        models[agent] = {
            "model_id": f"sim-{name}-{agent}",
            "price_in_per_mtok": float(prices.price_in_per_mtok or 0.0),
            "price_out_per_mtok": float(prices.price_out_per_mtok or 0.0),
            "simulated": {
                "worker": {"default": round(float(np.mean([x for v in m.worker.values() for x in v])), 4)
                           if m.worker else 0.0, **worker},
                "verifier": {"accept_correct": round(ac, 4), "accept_wrong": round(aw, 4)},
                "thinker": {"valid": round(valid, 4), "suggest_worker": round(sw, 4)},
                "tokens": {role: max(1, int(round(float(np.mean(t))))) if t else 100 for role, t in
                           (("worker", m.worker_tokens), ("thinker", m.thinker_tokens),
                            ("verifier", m.verifier_tokens))},
            },
        }
        notes[agent] = {"worker_answers": {s: len(v) for s, v in sorted(m.worker.items())},
                        "judged_correct": n_ac, "judged_wrong": n_aw, "thinker_replies": n_valid,
                        "valid_thinker_replies": n_sw}
    header = (f"# @package pool\n# Written by `trinity pool calibrate` from measurements of pool '{pool.name}'"
              f"{' (' + source + ')' if source else ''}.\n# `measured` counts the cases behind each rate (a rate "
              "measured on none is 0.5). Keys as in complementary.yaml.\n")
    body = {"profile": name, "measured": notes, "models": models}
    return header + yaml.safe_dump(body, sort_keys=False)


def write_profile(text: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
