"""The record of one episode: what every table, fitness and report is computed from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trinity.pool.types import CallResult

END_REASONS = ("accept", "verifier_before_answer", "turn_limit", "pool_failure", "budget")


@dataclass(frozen=True)
class EpisodeId:
    generation: int    # -1 outside evolution (validation, evaluation, serving)
    candidate: int     # -1 for the distribution mean / a baseline
    item: str          # TaskItem.uid
    repeat: int = 0

    def key(self) -> str:
        return f"g{self.generation}/c{self.candidate}/{self.item}/r{self.repeat}"


@dataclass
class Turn:
    index: int
    agent: str                     # pool model name
    agent_index: int
    role: str                      # worker | thinker | verifier
    role_from_thinker: bool        # the role came from the previous Thinker's <suggested_role>
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0              # what the call was paid (a response-cache hit: 0)
    cached: bool = False
    ok: bool = True
    verdict: str | None = None     # ACCEPT | REJECT for verifier turns
    error: str | None = None
    router_role: str | None = None     # the role the router chose (differs from `role` when overridden)
    sample_index: int = 0              # pool sampling index, from (item, repeat, turn) only
    called: bool = True                # False for the verifier-before-answer turn (no pool call made)
    suggested_role: str | None = None  # thinker turns: the valid <suggested_role>; None if discarded
    reply: str | None = None           # the model's reply, kept only when protocol.record_replies is on
    finish_reason: str | None = None   # as the pool server reported it: "stop", "length" (hit max_tokens), ...
    cached_prompt_tokens: int = 0      # of prompt_tokens, those served from the server's KV prefix cache
    replayed: bool = False             # served from a recording (pool.replay): no pool server did this work now
    price_usd: float = 0.0             # the call at list prices, paid or not: a cost-aware fitness must not
    #                                    favour whichever candidate reached a shared call second
    call: CallResult | None = field(default=None, repr=False, compare=False)   # what the pool returned (the
    #                                    fields above are read from it); None: no call, or a hand-built turn

    @property
    def refused(self) -> bool:
        """The pool refused the call because a budget is spent: it sent no request."""
        return self.call is not None and self.call.budget_exhausted

    def to_dict(self) -> dict[str, Any]:
        """The turn as plain data: every field but its CallResult (the trace's one serialised form)."""
        d = asdict(self)
        del d["call"]
        return d


@dataclass
class Trace:
    episode: EpisodeId
    seed: int
    turns: list[Turn] = field(default_factory=list)
    final_answer: str | None = None
    reward: float = 0.0
    end_reason: str = "turn_limit"
    graded: bool = False           # the grader scored final_answer (False: reward 0 without grading)
    error: str | None = None       # an exception (grader, router) that ended or spoiled the episode

    @property
    def turns_used(self) -> int:
        return len(self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.turns)

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.turns)

    @property
    def price_usd(self) -> float:
        return sum(t.price_usd for t in self.turns)

    @property
    def calls(self) -> int:
        """Requests the episode sent the pool: one per turn, except a verifier-before-answer turn (no call) and
        a call refused because a budget is spent. A failed call counts: it was sent."""
        return sum(1 for t in self.turns if t.called and not t.refused)

    @property
    def cache_hits(self) -> int:
        return sum(1 for t in self.turns if t.cached)

    def to_dict(self) -> dict[str, Any]:
        """The trace as plain data, turns by Turn.to_dict, with turns_used."""
        d = asdict(self)
        d["turns"] = [t.to_dict() for t in self.turns]
        d["turns_used"] = self.turns_used
        return d
