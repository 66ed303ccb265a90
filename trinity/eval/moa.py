"""Mixture-of-Agents: every pool model answers on its own, then one model merges the answers.

One layer of proposers (all L pool models, concurrently) and one aggregator: L + 1 pool calls per
query. Decisions:
- A proposer receives exactly what a one-turn Worker receives (the protocol's Worker prompt and the
  shared message) with the sample index of turn 0, so its call is the same request as `single:<model>`'s
  and the response cache serves both from one real call; the aggregator call uses turn 1's index.
- Failed proposals are left out of the aggregation; with none left the episode ends "pool_failure".
  A refused call (budget spent) ends it "budget". Both score 0 ungraded, as in the turn protocol.
- The aggregated answer is graded like an answer scored at the turn limit (end_reason "turn_limit").
Prompts live in config (`eval.moa`), so they can be changed without code.
"""

from __future__ import annotations

import asyncio
from typing import Any

from trinity.config_schema import section
from trinity.config_schema.eval import MoA
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import ChatPool, Grader, SharedMessage, fill, sample_index_for, worker_messages
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.eval.episode_functions import EpisodeFn
from trinity.pool.types import CallResult
from trinity.tasks.types import TaskItem

AGGREGATOR_ROLE = "aggregator"
def moa_prompts(cfg: Any) -> MoA:
    """The prompts of `cfg.eval.moa` (absent keys at the schema's defaults); a missing key or placeholder is a
    ConfigError naming the key."""
    return section(cfg, MoA, "eval.moa")


def aggregator_messages(prompts: MoA, query: str, proposals: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The aggregator's request: its system prompt, and the task with the numbered (model, text) proposals."""
    joined = "\n\n".join(fill(prompts.proposal_format, n=str(i + 1), model=model, text=text.strip())
                         for i, (model, text) in enumerate(proposals))
    return [{"role": "system", "content": prompts.aggregator_system},
            {"role": "user", "content": fill(prompts.aggregator_format, query=query, proposals=joined)}]


def _turn(index: int, agents: list[str], agent_index: int, role: str, sample_index: int, result: CallResult,
          keep_reply: bool) -> Turn:
    return Turn(index=index, agent=agents[agent_index], agent_index=agent_index, role=role,
                role_from_thinker=False, router_role=None, sample_index=sample_index,
                prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                latency_s=result.latency_s, cost_usd=result.cost_usd, cached=result.cached, ok=result.ok,
                error=None if result.ok else result.error, reply=result.text if keep_reply else None,
                finish_reason=result.finish_reason, call=result)


def moa_episode(aggregator: int, prompts: MoA) -> EpisodeFn:
    """The episode function of Mixture-of-Agents with pool model `aggregator` merging the proposals."""

    async def episode(item: TaskItem, pool: ChatPool, agents: list[str], protocol_cfg: Any,
                      episode_id: EpisodeId, seed: int, grader: Grader) -> Trace:
        cfg = ProtocolConfig.from_config(protocol_cfg)
        trace = Trace(episode=episode_id, seed=seed)
        shared = SharedMessage(item.prompt, cfg.collaboration_instructions, cfg.thought_format)
        messages = worker_messages(cfg, shared, None)
        first = sample_index_for(item.uid, episode_id.repeat, 0)
        cap = cfg.max_tokens_for("worker", item.suite)   # proposals and the merged answer are answers
        results = await asyncio.gather(*(
            pool.chat(agent, messages, sample_index=first, max_tokens=cap, temperature=cfg.temperature,
                      role="worker")   # a proposal is an answer: each agent answers in its own setup
            for agent in agents
        ))
        for i, result in enumerate(results):
            trace.turns.append(_turn(i, agents, i, "worker", first, result, cfg.record_replies))
        if any(r.budget_exhausted for r in results):
            trace.end_reason = "budget"
            return trace
        proposals = [(agents[i], r.text) for i, r in enumerate(results) if r.ok]
        if not proposals:
            trace.end_reason = "pool_failure"
            return trace

        second = sample_index_for(item.uid, episode_id.repeat, 1)
        result = await pool.chat(agents[aggregator], aggregator_messages(prompts, item.prompt, proposals),
                                 sample_index=second, max_tokens=cap, temperature=cfg.temperature)
        trace.turns.append(_turn(len(agents), agents, aggregator, AGGREGATOR_ROLE, second, result,
                                 cfg.record_replies))
        if not result.ok:
            trace.end_reason = "budget" if result.budget_exhausted else "pool_failure"
            return trace
        trace.final_answer = result.text
        trace.end_reason = "turn_limit"
        try:
            trace.reward = float(await grader(item, result.text))
            trace.graded = True
        except Exception as e:  # as in the turn protocol: a grader bug costs this episode only
            trace.reward = 0.0
            trace.error = f"grader: {type(e).__name__}: {e}"
        return trace

    return episode
