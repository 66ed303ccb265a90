"""The evolution loop's run state: one immutable value per committed step.

Every step of the loop (x0's validation, a generation, a budget stop) returns a new RunState made with
`dataclasses.replace`; nothing updates a state in place, so the value a checkpoint was written from is
the value the run goes on from. The fields are set once; the containers inside them (the per-generation
rows, the best mean's record) are replaced by new ones, never appended to.

On disk the state is the plain dict the checkpoint has always held (`payload`, `from_payload`): the
checkpoint format, and the upgrades of older versions (trinity.evolve.upgrade), work on that dict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class RunState:
    version: int                 # the checkpoint version (trinity.evolve.upgrade.CHECKPOINT_VERSION)
    fingerprint: str             # the run key: a checkpoint of another key is refused
    strategy: str                # evolve.strategy
    n_params: int
    popsize: int
    generations_planned: int
    validation_routing: str      # coordinator.routing: the mode whose validation reward selects
    validation_select: str       # evolve.validation.select: the rule that keeps a validated mean
    state: Any                   # the algorithm's own immutable state (trinity.evolve.strategy_registry)
    next_generation: int
    x0: dict[str, Any] | None    # x0's validation (generation -1); None until it ran
    episode_parts: list[dict[str, Any]]    # the committed steps' Parquet parts (trinity.evolve.episode_parts)
    generation_rows: list[dict[str, Any]]  # one per finished generation: the generations table
    routing_rows: list[dict[str, Any]]     # the mean's routing matrix after every step
    best: dict[str, Any] | None            # the kept mean: params, generation, rewards
    validations: list[dict[str, Any]]      # every validated mean so far, x0 first (the selection rule reads them)
    stale_validations: int       # validations since the highest validation reward last rose (early stop)
    finished: bool
    stop_reason: str | None      # completed | plateau | budget
    stop_detail: str | None

    def payload(self) -> dict[str, Any]:
        """The dict a checkpoint holds (shallow: the field values themselves)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> RunState:
        """From a checkpoint's dict at the current version (extra keys an older loop wrote are dropped)."""
        return cls(**{f.name: payload[f.name] for f in dataclasses.fields(cls)})
