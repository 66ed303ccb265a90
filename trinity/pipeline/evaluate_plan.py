"""What the evaluate stage will run: its config checks, its item sets, and the chunks to run.

A chunk is one method on one suite of one item set; it is the unit that is run, saved and resumed, so a
chunk an earlier, interrupted run saved is read back instead of run again. The config checks here run
before any pool call or backbone load, so a typo fails at once instead of after the whole evaluation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import polars as pl

from trinity.assembly.runtime import StageRuntime
from trinity.config_schema import TrinityConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.contracts import Router
from trinity.errors import ConfigError
from trinity.eval import methods as method_registry
from trinity.eval.tables import RESULTS_SCHEMA
from trinity.pipeline import items as item_sel
from trinity.pipeline.rollouts import config_key


def min_items(cfg: TrinityConfig) -> int:
    """`eval.min_items` (default 20): below this many paired items the report gives no verdict. The schema
    refuses 0 and below when the config is typed, before any pool call."""
    return cfg.eval.min_items


EVAL_SETS = ("validation", "test")


def set_names(cfg: TrinityConfig) -> list[str]:
    """`eval.sets` (default both): `validation` = the items evolution validated on (they chose the kept
    coordinator, so they flatter it), `test` = the test split of the evaluated suites."""
    names = [str(n) for n in cfg.eval.sets]   # each one of EVAL_SETS: the schema's choice
    if not names:
        raise ConfigError(f"config key 'eval.sets' must be a non-empty list of {', '.join(EVAL_SETS)}; got {names}")
    return names


def eval_sets(cfg: TrinityConfig) -> dict[str, dict[str, list]]:
    """The items of each set `eval.sets` asks for, by suite: evolution's validation items, and a seeded
    sample of `eval.items_per_suite` test items of each evaluated suite."""
    n = cfg.eval.items_per_suite
    wanted = set_names(cfg)
    sets: dict[str, dict[str, list]] = {"validation": {}, "test": {}}
    if "validation" in wanted:
        for it in item_sel.validation_items(cfg):
            sets["validation"].setdefault(it.suite, []).append(it)
    if "test" not in wanted:
        return sets
    for suite in item_sel.eval_suites(cfg):
        chosen = item_sel.sample(item_sel.load_split(cfg, [suite], "test"), n, int(cfg.seed), "eval", suite)
        if chosen:
            sets["test"][suite] = chosen
    return sets


@dataclass(frozen=True)
class Chunk:
    """One method on one suite of one item set: the unit that is run, saved and resumed."""

    set_name: str
    suite: str
    method: str
    path: Path                     # its saved results (under <paths.cache>/eval/<config key>/)
    specs: list                    # the episodes to run
    protocol: ProtocolConfig       # the protocol config it runs under
    episode: Any = None            # a method's own episode function (Mixture-of-Agents), else None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.set_name, self.suite, self.method


def plan_chunks(cfg: TrinityConfig, ctx: StageRuntime, mctx: method_registry.MethodContext, methods: list,
                sets: dict) -> tuple[dict[tuple, pl.DataFrame], list[Chunk]]:
    """Every (set, suite, method): its results when an earlier, interrupted run saved them, else a Chunk
    to run."""
    folder = Path(cfg.paths.cache) / "eval" / config_key(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    finished: dict[tuple, pl.DataFrame] = {}
    pending: list[Chunk] = []
    for set_name, by_suite in sets.items():
        for suite, items in by_suite.items():
            for m in methods:
                tag = f"__{m.fingerprint}" if m.fingerprint else ""
                path = folder / f"{set_name}__{m.name.replace(':', '_')}__{suite}{tag}.parquet"
                if path.exists():
                    frame = pl.read_parquet(path)
                    if frame.schema == pl.Schema(RESULTS_SCHEMA):  # else written by older code: run it again
                        finished[(set_name, suite, m.name)] = frame
                        continue
                protocol = m.protocol if m.protocol is not None else cfg.protocol
                if m.max_turns is not None:
                    protocol = dataclasses.replace(ProtocolConfig.from_config(protocol), max_turns=m.max_turns)
                # no router (None) for a method with its own episode function: its episodes use none
                router = cast(Router, m.build(mctx) if m.episode is None else None)
                specs = ctx.specs_for(router, items, generation=-1, candidate=-1, repeats=int(cfg.eval.repeats))
                pending.append(Chunk(set_name, suite, m.name, path, specs, protocol, m.episode))
    return finished, pending
