"""Serving a cost-quality frontier (`trinity serve --frontier PATH`): several trained heads, one per request.

The folder is the frontier stage's (<paths.frontier>, docs/COST_FRONTIER.md): frontier.json
names every head with its cost weight and its reward and cost per query measured on the test items, and
each head's coordinator.safetensors lies in its own sub-folder. Only the heads on the frontier are loaded:
a dominated one is never the right choice. The heads share one backbone and feature service (they were
trained from one coordinator config with other cost weights: only the linear head differs), so serving a
frontier costs about what serving one head does.

Each request picks one head (trinity.eval.frontier.choose, the rules in one place):
- `trinity.max_cost_usd` (else `serve.limits.max_cost_usd`) keeps the heads whose measured cost per query
  is within it; when none is, the cheapest, with a note in the trace (not a 400: the field was already an
  episode spending cap before frontiers, and that cap still applies);
- `trinity.quality`: `low` the cheapest kept head, `high` the best reward, `medium` the head nearest the
  middle of the kept heads' reward range; without it, the best reward among the kept heads;
- a frontier measured in tokens (a pool without prices) cannot be compared with dollars: max_cost_usd then
  chooses nothing and the note says so.
The trace's `frontier` field names the head, its cost weight, its measured figures and why it was chosen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trinity.errors import ConfigError
from trinity.eval.frontier import choose, read_manifest
from trinity.serve.request_episode import EpisodeResult, EpisodeRunner, OnEvent
from trinity.serve.schema import ChatRequest

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Route
    from trinity.serve.metrics import Metrics


@dataclass(frozen=True)
class FrontierHead:
    name: str
    cost_weight: float
    reward: float
    cost_per_query: float          # in the frontier's cost unit
    file: Path                     # its coordinator.safetensors


@dataclass(frozen=True)
class ServedFrontier:
    folder: Path
    cost_unit: str                 # usd | ktokens
    routing: str                   # the routing the figures were measured with
    heads: tuple[FrontierHead, ...]

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> ServedFrontier:
        """The frontier heads of a frontier folder; a folder that is not one, holds no frontier, or misses a
        head's file is refused naming --frontier."""
        folder = Path(folder)
        manifest = read_manifest(folder, name="--frontier")
        if not manifest.get("enabled"):
            raise ConfigError(f"--frontier {folder}: holds no frontier "
                              f"({manifest.get('reason', 'the stage was off')}); set evolve.cost_weights and run the "
                              "frontier stage")
        unit = manifest.get("cost_unit")
        if unit not in ("usd", "ktokens"):
            raise ConfigError(f"--frontier {folder}: frontier.json has no valid cost_unit "
                              f"(usd | ktokens), got {unit!r}")
        heads = []
        for entry in manifest.get("heads") or []:
            if not entry.get("on_frontier"):
                continue
            try:
                head = FrontierHead(str(entry["name"]), float(entry["cost_weight"]), float(entry["reward"]),
                                    float(entry["cost_per_query"]), folder / str(entry["path"]))
            except (KeyError, TypeError, ValueError) as e:
                raise ConfigError(f"--frontier {folder}: a head in frontier.json lacks a valid {e}") from None
            if not head.file.is_file():
                raise ConfigError(f"--frontier {folder}: head {head.name}'s coordinator {head.file} is missing")
            heads.append(head)
        if not heads:
            raise ConfigError(f"--frontier {folder}: frontier.json names no head on the frontier")
        return cls(folder, str(unit), str(manifest.get("routing") or "argmax"), tuple(heads))

    def choose(self, *, max_cost_usd: float | None, quality: str | None) -> tuple[FrontierHead, str, str | None]:
        """(head, chosen_by: quality | max_cost_usd | default, note or None)."""
        points = [(h.name, h.reward, h.cost_per_query) for h in self.heads]
        name, chosen_by, note = choose(points, unit=self.cost_unit, max_cost_usd=max_cost_usd, quality=quality)
        return next(h for h in self.heads if h.name == name), chosen_by, note


class FrontierRunner:
    """EpisodeRunner's interface over one EpisodeRunner per head: each request runs on the head it picks."""

    def __init__(self, frontier: ServedFrontier, runners: dict[str, EpisodeRunner]):
        missing = [h.name for h in frontier.heads if h.name not in runners]
        if missing:
            raise ValueError(f"no runner for frontier heads {missing}")
        self.frontier = frontier
        self.runners = runners
        self._metrics: Metrics | None = None

    @property
    def agents(self) -> list[str]:
        return next(iter(self.runners.values())).agents

    @property
    def metrics(self) -> Metrics | None:
        return self._metrics

    @metrics.setter
    def metrics(self, value: Metrics | None) -> None:   # the app hands its metrics to the runner
        self._metrics = value
        for runner in self.runners.values():
            runner.metrics = value

    async def route(self, request: ChatRequest) -> Route:
        """The first turn's pick of the head this request's budget or quality would get."""
        head, _, _ = self.frontier.choose(max_cost_usd=request.max_cost_usd, quality=request.quality)
        return await self.runners[head.name].route(request)

    async def run(self, request: ChatRequest, request_id: str, on_event: OnEvent | None = None) -> EpisodeResult:
        head, chosen_by, note = self.frontier.choose(max_cost_usd=request.max_cost_usd, quality=request.quality)
        result = await self.runners[head.name].run(request, request_id, on_event)
        result.trace["frontier"] = {
            "head": head.name, "cost_weight": head.cost_weight, "chosen_by": chosen_by, "quality": request.quality,
            "max_cost_usd": request.max_cost_usd, "measured_reward": head.reward,
            "measured_cost_per_query": head.cost_per_query, "cost_unit": self.frontier.cost_unit, "note": note}
        return result
