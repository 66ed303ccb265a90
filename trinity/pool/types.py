"""What every pool call returns, success or failure."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class CallResult:
    model: str                 # pool model name (config key), not the provider's model id
    text: str                  # reply text ("" on failure)
    ok: bool
    error: str | None = None   # short reason on failure (e.g. "http 500 after 4 retries", "budget: max_calls")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0   # of prompt_tokens, those the server took from its KV prefix cache (no
    #                                 prefill work); 0 when the server does not say. Not the response cache.
    latency_s: float = 0.0
    cost_usd: float = 0.0
    retries: int = 0
    cached: bool = False
    budget_exhausted: bool = False  # the call was refused because a run budget is spent
    # Added by the pool client (issue 3); defaults keep hand-built results (test doubles) valid.
    error_kind: str | None = None   # typed error class name (trinity.pool.errors), e.g. "RateLimitError"
    finish_reason: str | None = None  # "stop", "length" (hit max_tokens), ... as the server reported it
    replayed: bool = False          # served from a recording (pool.replay): tokens, cost and latency as recorded
    price_usd: float = 0.0          # what the reply costs at the model's prices even when it was not paid
    #                                 (cache hit: cost_usd 0, price_usd > 0), so cost-aware fitness does
    #                                 not favour whichever candidate happened to call second

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
