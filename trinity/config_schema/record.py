"""Schema of the `record` group: which items `trinity record` records, with which roles and samples."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.config_schema.choices import RecordOrder
from trinity.config_schema.fields import number
from trinity.contracts import ROLES
from trinity.errors import ConfigError


@dataclass(frozen=True)
class RecordItems:
    """Items per suite and split: train and validation from tasks.train, test from tasks.train + transfer."""
    train: int = number(10, ge=0)
    validation: int = number(10, ge=0)
    test: int = number(15, ge=0)


@dataclass(frozen=True)
class RecordConfig:
    name: str = "local-small"               # the recording's folder under `dir`
    dir: str = "data/recordings"
    roles: list[str] = field(default_factory=lambda: list(ROLES))   # the roles the tree branches on
    samples: int = number(1, gt=0)          # replies recorded per call (sample index 0..samples-1)
    items: RecordItems = field(default_factory=RecordItems)
    # the order the items are recorded in (a recording grows in it, so a stopped run leaves a prefix of it)
    order: RecordOrder = RecordOrder.balanced
    concurrent_items: int = number(3, gt=0)  # items expanded at once (their calls share the pool's limits)
    max_calls: int | None = number(None, gt=0)   # stop (resumably) after this many new calls; null: no cap
    # seconds between the lines that say how far the items in flight are (an item takes minutes on a local pool)
    heartbeat_s: float = number(60.0, gt=0)
    # where the recorder's items come from: null, the pipeline's prepared folder (paths.prepared, as the
    # prepare stage left it); a folder, the recorder's own, which it prepares from the experiment's tasks
    # section on every run (seconds), so the items chosen never depend on what the pipeline last prepared
    prepared: str | None = None

    def check(self, key: str) -> None:
        bad = [r for r in self.roles if r not in ROLES]
        if bad or "worker" not in self.roles or len(set(self.roles)) != len(self.roles):
            raise ConfigError(f"config key '{key}.roles' must be distinct names from {list(ROLES)} including "
                              f"'worker', got {list(self.roles)}")
        if not str(self.name).strip() or "/" in str(self.name):
            raise ConfigError(f"config key '{key}.name' must be a folder name, got {self.name!r}")
