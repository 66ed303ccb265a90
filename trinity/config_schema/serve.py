"""The `serve` group: the OpenAI-compatible endpoint; frozen, and read as it is by trinity.serve (ServeSettings
holds it beside the role policy it derives)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.config_schema.choices import RoutingMode, ServeCacheMode
from trinity.config_schema.fields import number
from trinity.errors import ConfigError


@dataclass(frozen=True)
class ServeLimits:
    max_turns: int | None = number(None, gt=0)       # null: protocol.max_turns
    max_tokens: int = number(1024, gt=0)
    max_cost_usd: float | None = number(None, gt=0)


@dataclass(frozen=True)
class RoleAccess:
    allow: list[str] | None = None     # null: every pool model
    deny: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = number(8700, ge=0, le=65535)
    model_name: str = "trinity"
    routing: RoutingMode = RoutingMode.argmax
    answer_first: bool = True              # never the Verifier before a Worker has answered
    auth_token_env: str | None = "TRINITY_SERVE_TOKEN"
    max_concurrency: int = number(8, gt=0)        # episodes at once
    max_queue: int = number(256, ge=0)            # requests waiting for a slot (0: refuse at once)
    queue_timeout_s: float = number(60.0, gt=0)   # the longest a request waits for a slot
    drain_timeout_s: float = number(20.0, ge=0)   # on SIGTERM: how long in-flight episodes may finish
    retry_after_s: int = number(1, gt=0)
    max_request_bytes: int = number(1_000_000, gt=0)
    max_messages: int = number(64, gt=0)
    response_cache: ServeCacheMode = ServeCacheMode.off
    keepalive_s: float = number(15.0, gt=0)
    registry_poll_s: float = number(1.0, gt=0)   # --registry: how often registry.json is checked
    log_prompts: bool = False
    limits: ServeLimits = field(default_factory=ServeLimits)
    roles: dict[str, RoleAccess] = field(default_factory=dict)

    def check(self, key: str) -> None:
        from trinity.contracts import ROLES

        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown:
            raise ConfigError(f"config key '{key}.roles.{unknown[0]}' is not a role ({', '.join(ROLES)})")
