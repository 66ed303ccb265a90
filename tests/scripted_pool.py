"""Test doubles for the turn protocol: a scripted pool (PoolClient's `chat` signature) and routers.

ScriptedPool replies by (model, role) or by role; the role of a call is read from its system prompt,
which must be one of the protocol config's role prompts. A reply is a string, a `Fail`, a ready
CallResult, or a function (messages, sample_index) -> one of those. A list of replies is used up in
order (for single-episode scripts; concurrent episodes should use functions, which stay deterministic).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trinity.config_schema.protocol import ProtocolConfig
from trinity.pool.types import CallResult


@dataclass(frozen=True)
class Fail:
    error: str = "http 500 after 3 retries"
    budget_exhausted: bool = False


@dataclass(frozen=True)
class Call:
    model: str
    role: str
    messages: list[dict[str, str]]
    sample_index: int
    max_tokens: int | None
    temperature: float | None


Reply = Any  # str | Fail | CallResult | Callable[[list[dict], int], str | Fail | CallResult]


class ScriptedPool:
    """A pool double with what a stage runtime asks of a PoolClient (trinity.assembly.runtime.StageRuntime):
    scripted `chat` replies, no recording (`replay`), list prices at `cost_per_token`, its call count as
    `totals()`, and nothing to close."""

    replay = None

    def __init__(self, protocol_cfg: Any, script: dict[Any, Reply | list[Reply]] | None = None,
                 *, delay_s: float | Callable[[str, int], float] = 0.0, cost_per_token: float = 1e-6):
        cfg = ProtocolConfig.from_config(protocol_cfg)
        self._role_of_system = {cfg.system_prompt(r): r for r in ("worker", "thinker", "verifier")}
        self._script = {k: (list(v) if isinstance(v, list) else v) for k, v in (script or {}).items()}
        self._delay_s = delay_s
        self._cost_per_token = cost_per_token
        self.calls: list[Call] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def totals(self) -> dict:
        return {"calls": self.count}

    def list_price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens + completion_tokens) * self._cost_per_token

    async def hand_over_totals(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    @property
    def count(self) -> int:
        return len(self.calls)

    def counts(self) -> Counter:
        return Counter((c.model, c.role) for c in self.calls)

    def _reply_for(self, model: str, role: str) -> Reply:
        for key in ((model, role), role):
            if key in self._script:
                entry = self._script[key]
                if isinstance(entry, list):
                    if not entry:
                        raise AssertionError(f"script for {key!r} is used up")
                    return entry.pop(0)
                return entry
        raise AssertionError(f"no scripted reply for model {model!r} as {role}")

    async def chat(self, model: str, messages: list[dict[str, str]], *, sample_index: int = 0,
                   max_tokens: int | None = None, temperature: float | None = None,
                   role: str | None = None, context=None) -> CallResult:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        role = self._role_of_system.get(system)
        if role is None:
            raise AssertionError(f"system prompt is not a protocol role prompt: {system[:60]!r}")
        self.calls.append(Call(model, role, messages, sample_index, max_tokens, temperature))
        reply = self._reply_for(model, role)
        if callable(reply):
            reply = reply(messages, sample_index)
        delay = self._delay_s(model, sample_index) if callable(self._delay_s) else self._delay_s
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if delay:
                await asyncio.sleep(delay)
        finally:
            self.in_flight -= 1
        return self._result(model, messages, reply, delay)

    def _result(self, model: str, messages: list[dict[str, str]], reply: Reply, delay: float) -> CallResult:
        if isinstance(reply, CallResult):
            return reply
        if isinstance(reply, Fail):
            return CallResult(model=model, text="", ok=False, error=reply.error,
                              budget_exhausted=reply.budget_exhausted)
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        completion_tokens = len(str(reply).split())
        return CallResult(model=model, text=str(reply), ok=True, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, latency_s=delay,
                          cost_usd=(prompt_tokens + completion_tokens) * self._cost_per_token)


def stable_hash(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:4], "little")


class ScriptedRouter:
    """Returns the scripted (agent_index, role) per turn and records the transcripts it was shown."""

    def __init__(self, choices: list[tuple[int, str]]):
        self.choices = list(choices)
        self.transcripts: list[str] = []

    async def choose(self, transcript: str, turn: int, rng) -> tuple[int, str]:
        self.transcripts.append(transcript)
        return self.choices[turn]


@dataclass
class RandomRouter:
    """Uniform over agents, weighted over roles, from the episode rng: deterministic given the episode seed."""

    n_agents: int
    role_weights: tuple[float, float, float] = (0.6, 0.2, 0.2)

    async def choose(self, transcript: str, turn: int, rng) -> tuple[int, str]:
        agent = int(rng.integers(self.n_agents))
        role = ("worker", "thinker", "verifier")[int(rng.choice(3, p=self.role_weights))]
        await asyncio.sleep(0)  # let other episodes run, as a batching coordinator would
        return agent, role
