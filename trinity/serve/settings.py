"""The serving settings (conf/serve/*.yaml), validated once, and the per-role model policy.

A RolePolicy says which pool models may take each role: the configured allow list (null = every
model) minus the deny list. Requests may narrow it (`trinity.allow` / `trinity.deny`), never widen it.
Every role keeps at least one model: the Thinker's suggested role overrides the router's choice, so a
role with no model could be forced on a turn that nobody may take.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from trinity.errors import ConfigError
from trinity.routers.base import ROLES

ROUTING_MODES = ("argmax", "sample")
CACHE_MODES = ("off", "read_write")


@dataclass(frozen=True)
class RolePolicy:
    agents: tuple[str, ...]                      # pool model names, head order
    allowed: Mapping[str, frozenset[int]]        # role -> allowed agent indices (never empty)

    @classmethod
    def everyone(cls, agents: Sequence[str]) -> "RolePolicy":
        return cls(tuple(agents), {role: frozenset(range(len(agents))) for role in ROLES})

    def allows(self, agent_index: int, role: str) -> bool:
        return agent_index in self.allowed[role]

    def narrowed(self, allow: Mapping[str, Sequence[str] | None], deny: Mapping[str, Sequence[str]],
                 *, where: str) -> "RolePolicy":
        """This policy intersected with `allow` and minus `deny` (role -> model names). `where` prefixes
        error keys ('serve.roles' for config, 'trinity' for requests). Raises ValueError(key, message)."""
        index = {name: i for i, name in enumerate(self.agents)}
        allowed = {}
        for role in ROLES:
            keep = set(self.allowed[role])
            names = allow.get(role)
            if names is not None:
                keep &= {_agent(index, n, f"{where}.{role}.allow" if where == "serve.roles" else f"{where}.allow.{role}")
                         for n in names}
            keep -= {_agent(index, n, f"{where}.{role}.deny" if where == "serve.roles" else f"{where}.deny.{role}")
                     for n in deny.get(role) or ()}
            if not keep:
                key = f"{where}.{role}" if where == "serve.roles" else f"{where}.allow.{role}"
                raise PolicyError(key, f"no pool model may take the {role} role (every role needs at least one)")
            allowed[role] = frozenset(keep)
        return RolePolicy(self.agents, allowed)

    def to_dict(self) -> dict[str, list[str]]:
        return {role: [self.agents[i] for i in sorted(self.allowed[role])] for role in ROLES}


class PolicyError(ValueError):
    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def _agent(index: Mapping[str, int], name: Any, key: str) -> int:
    if not isinstance(name, str) or name not in index:
        raise PolicyError(key, f"{name!r} is not a pool model ({', '.join(index)})")
    return index[name]


@dataclass(frozen=True)
class ServeSettings:
    host: str
    port: int
    model_name: str
    routing: str
    auth_token_env: str | None
    max_concurrency: int
    retry_after_s: int
    max_request_bytes: int
    max_messages: int
    response_cache: str
    keepalive_s: float
    log_prompts: bool
    answer_first: bool           # never the Verifier before a Worker has answered
    max_turns: int               # bound of a request's max_turns (and the default K)
    max_tokens: int              # bound of a request's max_tokens
    max_cost_usd: float | None   # per-request cost cap (default and bound)
    policy: RolePolicy
    frontier: bool = False       # serving a cost-quality frontier (--frontier): requests may pick a head

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> "ServeSettings":
        """From the whole composed config (needs cfg.serve, cfg.pool.models, cfg.protocol.max_turns)."""
        s = OmegaConf.to_container(cfg.serve, resolve=True) if isinstance(cfg.serve, DictConfig) else dict(cfg.serve)
        limits = s.get("limits") or {}
        agents = [str(name) for name in cfg.pool.models]
        protocol_turns = int(cfg.protocol.max_turns)
        max_turns = _int(limits.get("max_turns"), "serve.limits.max_turns", default=protocol_turns)
        routing = s.get("routing", "argmax")
        if routing not in ROUTING_MODES:
            raise ConfigError(f"config key 'serve.routing' must be argmax|sample, got {routing!r}")
        cache = s.get("response_cache", "off")
        cache = "off" if cache is False else cache  # YAML 1.1 reads a bare `off` as false
        if cache not in CACHE_MODES:
            raise ConfigError(f"config key 'serve.response_cache' must be off|read_write, got {cache!r}")
        cost = limits.get("max_cost_usd")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost <= 0):
            raise ConfigError(f"config key 'serve.limits.max_cost_usd' must be > 0 or null, got {cost!r}")
        port = _int(s.get("port"), "serve.port", minimum=0)
        if port > 65535:
            raise ConfigError(f"config key 'serve.port' must be a TCP port, got {port}")
        roles = s.get("roles") or {}
        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise ConfigError(f"config key 'serve.roles.{unknown[0]}' is not a role ({', '.join(ROLES)})")
        try:
            policy = RolePolicy.everyone(agents).narrowed(
                {r: (roles.get(r) or {}).get("allow") for r in ROLES},
                {r: (roles.get(r) or {}).get("deny") or [] for r in ROLES}, where="serve.roles")
        except PolicyError as e:
            raise ConfigError(f"config key '{e.key}': {e.message}") from None
        return cls(
            host=str(s.get("host", "127.0.0.1")),
            port=port,
            model_name=str(s.get("model_name", "trinity")),
            routing=routing,
            auth_token_env=s.get("auth_token_env") or None,
            max_concurrency=_int(s.get("max_concurrency"), "serve.max_concurrency"),
            retry_after_s=_int(s.get("retry_after_s", 1), "serve.retry_after_s"),
            max_request_bytes=_int(s.get("max_request_bytes"), "serve.max_request_bytes"),
            max_messages=_int(s.get("max_messages", 64), "serve.max_messages"),
            response_cache=cache,
            keepalive_s=float(s.get("keepalive_s", 15)),
            log_prompts=bool(s.get("log_prompts", False)),
            answer_first=bool(s.get("answer_first", True)),
            max_turns=max_turns,
            max_tokens=_int(limits.get("max_tokens", 1024), "serve.limits.max_tokens"),
            max_cost_usd=float(cost) if cost is not None else None,
            policy=policy,
        )

    def token(self) -> str | None:
        """The bearer token from the environment (None: no authentication)."""
        return os.environ.get(self.auth_token_env) or None if self.auth_token_env else None

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without a token."""
        if not is_loopback(self.host) and self.token() is None:
            raise ConfigError(
                f"config key 'serve.host' is {self.host!r}, which is not loopback: set "
                f"${self.auth_token_env or 'TRINITY_SERVE_TOKEN'} (serve.auth_token_env) to require a bearer token")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _int(value: Any, key: str, *, default: int | None = None, minimum: int = 1) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config key '{key}' must be an integer >= {minimum}, got {value!r}")
    return value
