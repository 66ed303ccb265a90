"""What every pool call returns, success or failure."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CallResult:
    model: str                 # pool model name (config key), not the provider's model id
    text: str                  # reply text ("" on failure)
    ok: bool
    error: str | None = None   # short reason on failure (e.g. "http 500 after 4 retries", "budget: max_calls")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    retries: int = 0
    cached: bool = False
    budget_exhausted: bool = False  # the call was refused because a run budget is spent

    def to_dict(self) -> dict:
        return asdict(self)
