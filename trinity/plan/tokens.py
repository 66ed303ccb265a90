"""Tokens per call of one suite under one config: the protocol's prompts and templates at 4 characters per
token, and each call's output cap as the run resolves it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES
from trinity.pipeline.workload import SuiteInfo

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 8        # chat-template tokens per message (role markers)
UNCAPPED_TOKENS = 4096      # assumed output of a call that no config caps
JUDGE_PROMPT_TOKENS = 300   # FastChat's judge instructions around the question and the answer


def _tok(text: Any) -> float:
    return len(str(text or "")) / CHARS_PER_TOKEN


def _template_tok(template: str, *placeholders: str) -> float:
    for p in placeholders:
        template = template.replace(p, "")
    return _tok(template)


@dataclass(frozen=True)
class SuiteTokens:
    """The token figures of calls on one suite under one config."""
    query: float
    base: dict[str, float]             # role -> prompt tokens before any transcript
    thought_overhead: float
    suggestion_overhead: float
    no_answer: float
    proposal_overhead: float
    caps: dict[tuple[str, str], int]   # (role, model) -> output cap
    judge: tuple[str, int] | None      # (judge model, its output cap) when a judge grades the suite


def suite_tokens(cfg: TrinityConfig, suite: SuiteInfo, agents: list[str], notes: set[str]) -> SuiteTokens:
    pc = cfg.protocol
    query = suite.prompt_chars / CHARS_PER_TOKEN
    review = _template_tok(pc.review_format, "{query}", "{answer}") + query + 2 * MESSAGE_OVERHEAD
    base = {"worker": _tok(pc.worker_system) + query + _tok(pc.collaboration_instructions) + 2 * MESSAGE_OVERHEAD,
            "thinker": _tok(pc.thinker_system) + review, "verifier": _tok(pc.verifier_system) + review}
    moa = cfg.eval.moa
    base["aggregator"] = (_tok(moa.aggregator_system) + query + 2 * MESSAGE_OVERHEAD
                          + _template_tok(moa.aggregator_format, "{query}", "{proposals}"))
    caps = {(role, m): output_cap(cfg, pc, role, suite.name, m, notes) for role in ROLES for m in agents}
    return SuiteTokens(query, base, _template_tok(pc.thought_format, "{n}", "{text}"),
                       _template_tok(pc.suggestion_format, "{suggestion}"), _tok(pc.no_answer_text),
                       _template_tok(moa.proposal_format, "{n}", "{text}") + 4,
                       caps, _judge(cfg, suite.name))


def model_setting(cfg: TrinityConfig, model: str, key: str) -> Any:
    """pool.models.<model>.<key> (typed: the schema's default where the entry leaves it out), or None for a model
    the pool does not have."""
    settings = cfg.pool.models.get(model)
    return getattr(settings, key) if settings is not None else None


def output_cap(cfg: TrinityConfig, pc: Any, role: str, suite: str, model: str, notes: set[str]) -> int:
    """As a run resolves it: the protocol's cap for (role, suite) (ProtocolConfig.max_tokens_for), else the
    model's own (trinity.pool.providers.model_max_tokens: its max_tokens, else pool.sampling.max_tokens)."""
    from trinity.pool.providers import model_max_tokens

    cap = pc.max_tokens_for(role, suite)
    if cap is None:
        cap = model_max_tokens(cfg.pool.models.get(model), cfg.pool)
    if cap is None:
        notes.add(f"no output cap for some calls (e.g. {model} as {role}): assumed {UNCAPPED_TOKENS} tokens")
        return UNCAPPED_TOKENS
    return int(cap)


def _judge(cfg: TrinityConfig, suite: str) -> tuple[str, int] | None:
    """(judge model, its output cap) as the suite's grader will call it, for a suite a judge grades."""
    from trinity.pipeline.suites import suite_for
    from trinity.tasks.registry import suite_class

    if getattr(suite_class(suite), "kind", None) != "judge":
        return None
    model, cap = suite_for(cfg, suite).judge_call()
    return str(model), cap
