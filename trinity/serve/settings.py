"""The serving settings (conf/serve/*.yaml), validated once, and the per-role model policy.

A RolePolicy says which pool models may take each role: the configured allow list (null = every
model) minus the deny list. Requests may narrow it (`trinity.allow` / `trinity.deny`), never widen it.
Every role keeps at least one model: the Thinker's suggested role overrides the router's choice, so a
role with no model could be forced on a turn that nobody may take.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.config_schema.serve import ServeConfig
from trinity.contracts import ROLES
from trinity.errors import ConfigError


@dataclass(frozen=True)
class RolePolicy:
    agents: tuple[str, ...]                      # pool model names, head order
    allowed: Mapping[str, frozenset[int]]        # role -> allowed agent indices (never empty)

    @classmethod
    def everyone(cls, agents: Sequence[str]) -> RolePolicy:
        return cls(tuple(agents), {role: frozenset(range(len(agents))) for role in ROLES})

    def allows(self, agent_index: int, role: str) -> bool:
        return agent_index in self.allowed[role]

    def narrowed(self, allow: Mapping[str, Sequence[str] | None], deny: Mapping[str, Sequence[str]],
                 *, where: str) -> RolePolicy:
        """This policy intersected with `allow` and minus `deny` (role -> model names). `where` prefixes
        error keys ('serve.roles' for config, 'trinity' for requests). Raises ValueError(key, message)."""
        index = {name: i for i, name in enumerate(self.agents)}
        allowed = {}
        for role in ROLES:
            keep = set(self.allowed[role])
            names = allow.get(role)
            if names is not None:
                keep &= {_agent(index, n, f"{where}.{role}.allow" if where == "serve.roles"
                                else f"{where}.allow.{role}")
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
    """What the endpoint runs with: the `serve` section itself (the schema's frozen object: host, port,
    admission, limits, ...) and what it derives from the rest of the config."""
    config: ServeConfig
    policy: RolePolicy           # which pool models may take each role
    max_turns: int               # bound of a request's max_turns (and the default K): serve.limits, else protocol
    frontier: bool = False       # serving a cost-quality frontier (--frontier): requests may pick a head

    @classmethod
    def from_config(cls, cfg: TrinityConfig) -> ServeSettings:
        """From the whole config (its serve section, pool models and protocol.max_turns). Types, choices and
        ranges are the schema's (trinity.config_schema.serve); this adds the role policy."""
        s = cfg.serve
        agents = list(cfg.pool.models)
        try:
            policy = RolePolicy.everyone(agents).narrowed(
                {r: s.roles[r].allow if r in s.roles else None for r in ROLES},
                {r: s.roles[r].deny if r in s.roles else [] for r in ROLES}, where="serve.roles")
        except PolicyError as e:
            raise ConfigError(f"config key '{e.key}': {e.message}") from None
        max_turns = s.limits.max_turns if s.limits.max_turns is not None else cfg.protocol.max_turns
        return cls(config=s, policy=policy, max_turns=max_turns)

    def token(self) -> str | None:
        """The bearer token from the environment (None: no authentication)."""
        env = self.config.auth_token_env
        return os.environ.get(env) or None if env else None

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback without a token."""
        host = self.config.host
        if not is_loopback(host) and self.token() is None:
            raise ConfigError(
                f"config key 'serve.host' is {host!r}, which is not loopback: set "
                f"${self.config.auth_token_env or 'TRINITY_SERVE_TOKEN'} (serve.auth_token_env) to require a bearer "
                "token")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
