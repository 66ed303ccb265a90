"""LLM-as-judge scoring (MT-Bench single-answer grading with the shipped judge prompts)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

_RATING = (re.compile(r"\[\[(\d+\.?\d*)\]\]"), re.compile(r"\[(\d+\.?\d*)\]"), re.compile(r"[Rr]ating:\s*(\d+\.?\d*)"))


class Judge(Protocol):
    """What a judged suite asks: anything with an async chat (the pool client, a test double) whose result
    has .ok, .text and .error."""

    async def chat(self, model: str, messages: list[dict[str, str]], *, max_tokens: int | None = ...,
                   temperature: float | None = ...) -> object: ...


@dataclass(frozen=True)
class JudgeVerdict:
    score: float            # reward in [0, 1] (rating / 10); 0 on any failure
    rating: float | None    # the judge's 1-10 rating, None when missing
    error: str | None = None
    judge_text: str = ""


def parse_rating(text: str) -> float | None:
    for pattern in _RATING:
        found = pattern.findall(text)
        if found:
            value = float(found[-1])
            if 1.0 <= value <= 10.0:
                return value
    return None


async def judge_score(judge: Judge, model: str, system_prompt: str, user_prompt: str, *, max_tokens: int = 512
                      ) -> JudgeVerdict:
    """Ask `judge` (anything with `async chat(model, messages, ...) -> .text/.ok`) for a 1-10 rating."""
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}]
    try:
        result = await judge.chat(model, messages, max_tokens=max_tokens, temperature=0.0)
    except Exception as e:  # a judge that raises is a failed call, not a crashed episode
        return JudgeVerdict(0.0, None, f"judge call raised {type(e).__name__}: {e}")
    if not getattr(result, "ok", False):
        return JudgeVerdict(0.0, None, f"judge call failed: {getattr(result, 'error', None) or 'unknown error'}")
    text = getattr(result, "text", "") or ""
    rating = parse_rating(text)
    if rating is None:
        return JudgeVerdict(0.0, None, "judge reply has no [[rating]]", text)
    return JudgeVerdict(rating / 10.0, rating, None, text)
