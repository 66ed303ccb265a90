"""How trinity.pool.servers starts the simulated pool (`pool.server: simulated`): the world file the server
plays (models in head order with their behaviour, the prepared-data folder, the protocol's role prompts)
and the command line. Importing this module registers the launcher; trinity.assembly.local_pool does."""

from __future__ import annotations

import hashlib
import json
import sys

from trinity.config_schema.pool import PoolConfig
from trinity.errors import ConfigError
from trinity.pool.servers import Launcher, LocalPool, ServerSpec, register_launcher
from trinity.simulated.profile import parse_profile


def simulated_world(pool: PoolConfig) -> dict:
    """What the simulated server plays, from the typed pool section: models (in head order) with their
    behaviour, the prepared-data folder it finds items in, and the protocol's role prompts."""
    models = parse_profile(pool)  # validates every model's behaviour (ConfigError names the key)
    roles = pool.role_prompts
    if not roles or not roles.get("worker"):
        raise ConfigError("config key 'pool.role_prompts' must give the protocol's system prompts "
                          "(worker, thinker, verifier; aggregator for Mixture-of-Agents)")
    if not pool.prepared:
        raise ConfigError("config key 'pool.prepared' must name the prepared-data folder the simulated pool reads")
    return {"prepared": str(pool.prepared), "role_prompts": dict(roles),
            "models": [{"name": m.name, "model_id": m.model_id, "simulated": m.to_config()} for m in models]}


def _simulated_blob(pool: LocalPool) -> str:
    return json.dumps(simulated_world(pool.pool), sort_keys=True, indent=1)


def _simulated_launch(pool: LocalPool, spec: ServerSpec) -> tuple[list[str], str]:
    pool.state_dir.mkdir(parents=True, exist_ok=True)
    path = pool.state_dir / f"{spec.name}-world.json"
    path.write_text(_simulated_blob(pool) + "\n")
    cmd = [sys.executable, "-m", "trinity.simulated.server", "--world", str(path),
           "--host", spec.host, "--port", str(spec.port)]
    return cmd, str(path)


def _fingerprint(pool: LocalPool, spec: ServerSpec) -> str:
    return hashlib.sha256(_simulated_blob(pool).encode()).hexdigest()[:16]


LAUNCHER = Launcher(_simulated_launch, _fingerprint)
register_launcher("simulated", LAUNCHER)
