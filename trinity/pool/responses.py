"""Reading a chat-completions HTTP response: the reply of a 2xx body, the reason of an error body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from trinity.pool.errors import MalformedResponseError


@dataclass(frozen=True)
class Reply:
    """What one successful HTTP attempt brought back."""
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    cached_prompt_tokens: int = 0


def parse_completion(content: bytes) -> Reply:
    """The reply in a chat-completions body; MalformedResponseError when it is not JSON or not that shape."""
    try:
        data = json.loads(content)
    except ValueError:
        preview = content[:60].decode("utf-8", "replace")
        raise MalformedResponseError(f"malformed response: not JSON ({len(content)} bytes: {preview!r})") from None
    try:
        choice = data["choices"][0]
        text = choice["message"].get("content") or ""
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        return Reply(text=str(text), prompt_tokens=prompt_tokens,
                     completion_tokens=int(usage.get("completion_tokens") or 0),
                     finish_reason=choice.get("finish_reason"),
                     cached_prompt_tokens=cached_prompt_tokens(data, prompt_tokens))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        shape = f"keys {sorted(data)[:8]}" if isinstance(data, dict) else type(data).__name__
        raise MalformedResponseError(f"malformed response: not a chat completion ({shape})") from None


def cached_prompt_tokens(data: Mapping[str, Any], prompt_tokens: int) -> int:
    """Prompt tokens the server served from its KV prefix cache: `usage.prompt_tokens_details.cached_tokens`
    (OpenAI, recent llama.cpp), else llama.cpp's `timings.cache_n`; clipped to [0, prompt_tokens].
    Anything missing or malformed counts as 0: this is a measurement, never a reason to fail a call."""
    for outer, inner in (("usage", "prompt_tokens_details"), ("timings", None)):
        try:
            node: Any = data.get(outer)
            value = node.get(inner).get("cached_tokens") if inner else node.get("cache_n")
            if value is None or isinstance(value, bool):
                continue
            return min(max(int(value), 0), max(prompt_tokens, 0))
        except (AttributeError, TypeError, ValueError, OverflowError):
            continue
    return 0


def error_message(response: httpx.Response) -> str:
    """A short reason from an error body (OpenAI style {"error": {"message": ...}} or plain text)."""
    try:
        data = response.json()
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except (ValueError, AttributeError):
        text = response.text
    text = " ".join(text.split())
    return text[:200] or response.reason_phrase
