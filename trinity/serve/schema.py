"""OpenAI chat-completions wire format: parse a request into an episode's inputs, build replies.

Parsing is by hand (not pydantic) so every refusal names the offending field in an OpenAI-style error
body: {"error": {"message", "type", "param", "code"}}. Per-request overrides ride in the extra body field
`trinity` (openai-python: `extra_body={"trinity": {...}}`):
    max_turns: int (<= serve.limits.max_turns)     max_cost_usd: float (<= serve.limits.max_cost_usd)
    allow: {role: [model, ...]}  deny: {role: [model, ...]}   (narrow the configured role policy)
    routing: argmax | sample
    quality: low | medium | high   (only on a server started with --frontier: which head; trinity.serve.frontier_heads)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from trinity.contracts import ROLES, ROUTING_MODES
from trinity.serve.settings import PolicyError, RolePolicy, ServeSettings

CHAT_ROLES = ("system", "developer", "user", "assistant")
OVERRIDE_KEYS = ("max_turns", "max_cost_usd", "allow", "deny", "routing", "quality")
QUALITY_LEVELS = ("low", "medium", "high")   # as trinity.eval.frontier.QUALITY_LEVELS
# Accepted and ignored: they do not change what one episode does.
IGNORED_FIELDS = ("top_p", "user", "metadata", "store", "presence_penalty", "frequency_penalty", "stop",
                  "logit_bias", "service_tier", "parallel_tool_calls", "reasoning_effort")
KNOWN_FIELDS = ("model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                "temperature", "seed", "n", "trinity") + IGNORED_FIELDS


class RequestError(Exception):
    """A refused request: HTTP status + the OpenAI error fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code},
                **self.extra}


@dataclass(frozen=True)
class ChatRequest:
    prompt: str                   # the episode's task prompt, built from the messages
    stream: bool
    include_usage: bool
    max_tokens: int | None        # each pool call's output cap (None: the pool's default)
    temperature: float | None
    seed: int | None
    max_turns: int
    max_cost_usd: float | None
    routing: str
    policy: RolePolicy
    quality: str | None = None    # a frontier server's head choice (trinity.serve.frontier_heads); None: by budget


def _bad(message: str, param: str | None, code: str | None = "invalid_value") -> RequestError:
    return RequestError(400, message, param=param, code=code)


def _int_field(body: dict, key: str, lo: int, hi: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{key}' must be an integer", key, "invalid_type")
    if value < lo or (hi is not None and value > hi):
        raise _bad(f"'{key}' must be between {lo} and {hi}, got {value}" if hi is not None
                   else f"'{key}' must be >= {lo}, got {value}", key)
    return value


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad("only text content parts are supported", f"{param}[{i}]", "unsupported_content")
            parts.append(part["text"])
        return "\n".join(parts)
    raise _bad("message content must be a string or a list of text parts", param, "invalid_type")


def render_prompt(messages: Any, max_messages: int) -> str:
    """One task prompt for the protocol's shared message: a lone user message as is; a conversation
    as labelled blocks, ending with the user's last message."""
    if not isinstance(messages, list) or not messages:
        kind = "invalid_type" if not isinstance(messages, list) else "invalid_value"
        raise _bad("'messages' must be a non-empty array", "messages", kind)
    if len(messages) > max_messages:
        raise _bad(f"at most {max_messages} messages per request", "messages")
    blocks = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad("each message must be an object", f"messages[{i}]", "invalid_type")
        role = m.get("role")
        if role not in CHAT_ROLES:
            raise _bad(f"message role must be one of {', '.join(CHAT_ROLES)}, got {role!r}", f"messages[{i}].role")
        blocks.append((role, _text(m.get("content"), f"messages[{i}].content")))
    if blocks[-1][0] != "user":
        raise _bad("the last message must be from the user", f"messages[{len(blocks) - 1}].role")
    if len(blocks) == 1:
        return blocks[0][1]
    return "\n\n".join(f"{'System' if r in ('system', 'developer') else r.capitalize()}:\n{t}" for r, t in blocks)


def parse_chat_request(body: Any, settings: ServeSettings) -> ChatRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", None, "invalid_type")
    unknown = sorted(set(body) - set(KNOWN_FIELDS))
    if unknown:
        raise _bad(f"unsupported field '{unknown[0]}'", unknown[0], "unsupported_parameter")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required", "model", "missing_required_parameter")
    if model != settings.config.model_name:
        raise RequestError(404,
                           f"the model '{model}' does not exist; this server serves '{settings.config.model_name}'",
                           param="model", code="model_not_found")
    prompt = render_prompt(body.get("messages"), settings.config.max_messages)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream", "invalid_type")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
    n = _int_field(body, "n", 1, 1)
    del n  # one episode, one choice
    max_tokens = _int_field(body, "max_completion_tokens", 1, settings.config.limits.max_tokens)
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", 1, settings.config.limits.max_tokens)
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise _bad("'temperature' must be a number between 0 and 2", "temperature")
        temperature = float(temperature)
    seed = _int_field(body, "seed", -(2 ** 63), 2 ** 63 - 1)
    return ChatRequest(prompt=prompt, stream=stream, include_usage=bool(options.get("include_usage", False)),
                       max_tokens=max_tokens, temperature=temperature, seed=seed,
                       **_overrides(body.get("trinity"), settings))


def _overrides(value: Any, settings: ServeSettings) -> dict[str, Any]:
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise _bad("'trinity' must be an object", "trinity", "invalid_type")
    unknown = sorted(set(value) - set(OVERRIDE_KEYS))
    if unknown:
        raise _bad(f"unsupported override 'trinity.{unknown[0]}' (known: {', '.join(OVERRIDE_KEYS)})",
                   f"trinity.{unknown[0]}", "unsupported_parameter")
    max_turns = _int_field({"trinity.max_turns": value.get("max_turns")}, "trinity.max_turns", 1, settings.max_turns)
    cost = value.get("max_cost_usd")
    if cost is not None:
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost <= 0:
            raise _bad("'trinity.max_cost_usd' must be a number > 0", "trinity.max_cost_usd")
        if settings.config.limits.max_cost_usd is not None and cost > settings.config.limits.max_cost_usd:
            raise _bad(f"'trinity.max_cost_usd' must be <= {settings.config.limits.max_cost_usd}",
                       "trinity.max_cost_usd")
        cost = float(cost)
    quality = value.get("quality")
    if quality is not None:
        if quality not in QUALITY_LEVELS:
            raise _bad(f"'trinity.quality' must be one of {', '.join(QUALITY_LEVELS)}", "trinity.quality")
        if not settings.frontier:
            raise _bad("'trinity.quality' picks a head of a cost-quality frontier; this server serves one "
                       "coordinator (start it with --frontier)", "trinity.quality", "unsupported_parameter")
    routing = value.get("routing", settings.config.routing)
    if routing not in ROUTING_MODES:
        raise _bad(f"'trinity.routing' must be one of {', '.join(ROUTING_MODES)}", "trinity.routing")
    lists = {}
    for key in ("allow", "deny"):
        entry = value.get(key) or {}
        if not isinstance(entry, dict) or any(r not in ROLES for r in entry):
            raise _bad(f"'trinity.{key}' must map roles ({', '.join(ROLES)}) to lists of pool models",
                       f"trinity.{key}", "invalid_type")
        for role, names in entry.items():
            if names is not None and not isinstance(names, list):
                raise _bad(f"'trinity.{key}.{role}' must be a list of pool models", f"trinity.{key}.{role}",
                           "invalid_type")
        lists[key] = entry
    try:
        deny = {r: v or [] for r, v in lists["deny"].items()}
        policy = settings.policy.narrowed(lists["allow"], deny, where="trinity")
    except PolicyError as e:
        raise _bad(e.message, e.key) from None
    return {"max_turns": max_turns or settings.max_turns,
            "max_cost_usd": cost if cost is not None else settings.config.limits.max_cost_usd,
            "routing": routing, "policy": policy, "quality": quality}


# ---------------------------------------------------------------------------------------- replies

def usage(trace: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(trace["prompt_tokens"]), int(trace["completion_tokens"])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "cost_usd": trace["cost_usd"], "pool_calls": trace["pool_calls"]}


def completion(request_id: str, model: str, answer: str, trace: dict[str, Any], created: int | None = None) -> dict:
    return {
        "id": request_id, "object": "chat.completion", "created": created or int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": usage(trace),
        "trinity": trace,
    }


def chunk(request_id: str, model: str, created: int, *, delta: dict | None = None, finish_reason: str | None = None,
          usage_: dict | None = None, trinity: dict | None = None) -> dict:
    """A chat.completion.chunk; without `delta` it has `choices: []` (usage and trace events), which
    clients that read only choices skip."""
    out: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [] if delta is None else
                           [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
    if usage_ is not None:
        out["usage"] = usage_
    if trinity is not None:
        out["trinity"] = trinity
    return out
