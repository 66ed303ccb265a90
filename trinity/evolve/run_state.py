"""The evolution loop's run state: one immutable value per committed step.

Every step of the loop (x0's validation, a generation, a budget stop) returns a new RunState made with
`dataclasses.replace`; nothing updates a state in place, so the value a checkpoint was written from is
the value the run goes on from. The fields are set once; the containers inside them (the per-generation
rows, the best mean's record) are replaced by new ones, never appended to.

In memory the rows are values (trinity.evolve.rows); on disk the state is the plain dict the checkpoint has
always held, each row a dict of its fields (`payload`, `from_payload`): the checkpoint format, and the
upgrades of older versions (trinity.evolve.upgrade), work on that dict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trinity.evolve.episode_parts import PartRef
from trinity.evolve.rows import GenerationRow, KeptMean, RoutingRow, ValidatedMean, X0Validation, as_dict, from_dict


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
    x0: X0Validation | None      # x0's validation (generation -1); None until it ran
    episode_parts: list[PartRef]           # the committed steps' Parquet parts (trinity.evolve.episode_parts)
    generation_rows: list[GenerationRow]   # one per finished generation: the generations table
    routing_rows: list[RoutingRow]         # the mean's routing matrix after every step
    best: KeptMean | None                  # the kept mean
    validations: list[ValidatedMean]       # every validated mean so far, x0 first (the selection rule reads them)
    stale_validations: int       # validations since the highest validation reward last rose (early stop)
    finished: bool
    stop_reason: str | None      # completed | plateau | budget
    stop_detail: str | None

    def payload(self) -> dict[str, Any]:
        """The dict a checkpoint holds: the field values, each row a dict of its fields (the values themselves,
        so an array two rows share is pickled once)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(x0=None if self.x0 is None else as_dict(self.x0),
                   episode_parts=[as_dict(r) for r in self.episode_parts],
                   generation_rows=[as_dict(r) for r in self.generation_rows],
                   routing_rows=[as_dict(r) for r in self.routing_rows],
                   best=None if self.best is None else as_dict(self.best),
                   validations=[as_dict(v) for v in self.validations])
        return out

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> RunState:
        """From a checkpoint's dict at the current version (extra keys an older loop wrote are dropped)."""
        values = {f.name: payload[f.name] for f in dataclasses.fields(cls)}
        values.update(x0=None if payload["x0"] is None else from_dict(X0Validation, payload["x0"]),
                      episode_parts=[from_dict(PartRef, r) for r in payload["episode_parts"]],
                      generation_rows=[from_dict(GenerationRow, r) for r in payload["generation_rows"]],
                      routing_rows=[from_dict(RoutingRow, r) for r in payload["routing_rows"]],
                      best=None if payload["best"] is None else from_dict(KeptMean, payload["best"]),
                      validations=[from_dict(ValidatedMean, v) for v in payload["validations"]])
        return cls(**values)
