"""Schema of the `pool` group: the models the coordinator routes among and how they are reached."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.config_schema.fields import number, written_keys
from trinity.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    temperature: float = number(0.1, ge=0)
    max_tokens: int | None = number(None, gt=0)
    timeout_s: float = number(300.0, gt=0)


@dataclass(frozen=True)
class Throughput:
    """Measured rates (benchmarks/local_pool_throughput.py); null: not measured."""
    decode_tok_s: float | None = number(None, gt=0)
    prefill_tok_s: float | None = number(None, gt=0)


@dataclass(frozen=True)
class Retry:
    """How failed calls are retried (trinity.pool.retry reads these values); the defaults live here."""
    max_retries: int = number(4, ge=0)
    backoff_base_s: float = number(0.5, ge=0)     # the first retry waits about this long, doubling each time
    backoff_max_s: float = number(30.0, ge=0)
    jitter: float = number(0.25, ge=0, le=1)      # each wait is shortened by a random fraction up to this
    retry_after_max_s: float = number(120.0, ge=0)  # a server asking for longer than this is waited this long


# An agent's Worker turn after a Verifier's REJECT (trinity.pool.agents.agent_request)
REDO_MODES = ("continue", "fresh", "anew")


@dataclass(frozen=True)
class AgentSetup:
    """`pool.models.<name>.setup`: what makes a pool entry an agent rather than a bare model (trinity.pool.agents).
    Several agents can share one model server (the same base_url or port)."""
    instructions: dict[str, str] = field(default_factory=dict)   # role -> the agent's own instructions, added
    #                                                               at the end of the task's user message
    max_tokens: dict[str, int] = field(default_factory=dict)     # role -> the agent's own output cap
    tool: str | None = None                                   # trinity.pool.agents.TOOLS name (Worker turns)
    verify: str | None = None    # trinity.pool.agents.CHECKS name: the agent's checking procedure as the
    #                                 Verifier (it runs code in the sandbox or re-solves the task and compares);
    #                                 null: it judges by reading, with the protocol's Verifier prompt
    redo: str = "continue"          # its Worker turn after a REJECT (trinity.pool.agents.REDO_MODES): continue
    #                                 (the shared transcript, the rejected answer's thought included) | fresh
    #                                 (the task and the Verifier's reason only) | anew (the task alone)

    def check(self, key: str) -> None:
        from trinity.contracts import ROLES

        for name, mapping in (("instructions", self.instructions), ("max_tokens", self.max_tokens)):
            unknown = sorted(set(mapping) - set(ROLES))
            if unknown:
                raise ConfigError(f"config key '{key}.{name}' has keys {unknown}; roles are {list(ROLES)}")
        for role, cap in self.max_tokens.items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
                raise ConfigError(f"config key '{key}.max_tokens.{role}' must be a positive integer, got {cap!r}")
        if self.redo not in REDO_MODES:
            raise ConfigError(f"config key '{key}.redo' must be one of {', '.join(REDO_MODES)}, got {self.redo!r}")


@dataclass(frozen=True)
class PoolModel:
    """One `pool.models.<name>` entry. Local llama.cpp models give asset/port/n_*; hosted ones
    base_url/api_key_env; simulated ones their `simulated` profile."""
    model_id: str | None = None
    provider: str | None = None             # default: pool.provider
    base_url: str | None = None
    api_key_env: str | None = None          # the environment variable holding the key (never the key)
    asset: str | None = None                # trinity.setup.assets name of a local GGUF
    port: int | None = number(None, gt=0, le=65535)
    n_ctx: int = number(4096, gt=0)           # llama.cpp: context, parallel slots, CPU threads
    n_parallel: int = number(4, gt=0)
    n_threads: int = number(2, gt=0)
    price_in_per_mtok: float | None = number(None, ge=0)    # USD per million prompt tokens
    price_out_per_mtok: float | None = number(None, ge=0)   # USD per million completion tokens
    max_concurrency: int | None = number(None, gt=0)
    requests_per_minute: float | None = number(None, gt=0)
    temperature: float | None = number(None, ge=0)          # per-model sampling overrides
    max_tokens: int | None = number(None, gt=0)
    timeout_s: float | None = number(None, gt=0)
    throughput: Throughput | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    simulated: dict[str, Any] | None = None  # the simulated pool's model profile (pool=simulated)
    setup: AgentSetup | None = None          # the agent's own instructions, caps and tool (null: the bare model)
    written: tuple[str, ...] = written_keys()   # the keys this entry's config wrote (n_threads: a local server)


@dataclass(frozen=True)
class Replay:
    """`pool.replay` (pool=recorded): serve replies from a recording made by `trinity record`."""
    recording: str = "data/recordings/local-small"
    on_miss: str = "error"            # error: a request the recording lacks is an error naming it | live
    #                                   live: send it to the live pool and add its reply to the recording

    def check(self, key: str) -> None:
        if self.on_miss not in ("error", "live"):
            raise ConfigError(f"config key '{key}.on_miss' must be error or live, got {self.on_miss!r}")


@dataclass(frozen=True)
class PoolConfig:
    name: str = "pool"
    provider: str = "openai"
    models: dict[str, PoolModel] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=Sampling)
    retry: Retry = field(default_factory=Retry)
    host: str = "127.0.0.1"
    port: int | None = number(None, gt=0, le=65535)   # a pool served by one server (pool=simulated)
    server: str | None = None                 # trinity.pool.servers.LAUNCHERS name; null: one per model
    state_dir: str = ".trinity/pool"
    startup_timeout_s: float = number(180.0, gt=0)
    prepared: str | None = None               # the simulated server's prepared items
    role_prompts: dict[str, str] | None = None
    profile: str | None = None
    outcome_seed: int | None = None           # pool=simulated: the outcome table's seed (${seed}: one per run)
    measured: dict[str, Any] | None = None    # a calibrated profile's measured counts
    replay: Replay | None = None              # pool=recorded: replies from a recording (trinity.record)
    from_recording: str | None = None         # pool=replay: this recording's folder; the pool is the one it
    #                                              was made from (its manifest's pool_config), replayed
    written: tuple[str, ...] = written_keys()   # the keys the pool's config wrote

    def check(self, key: str) -> None:
        if not self.models:
            raise ConfigError(f"config key '{key}.models' must map at least one model name to its settings")
