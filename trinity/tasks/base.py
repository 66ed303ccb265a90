"""The TaskSuite interface (a loader, a prompt format, an extractor, a grader), its Grade and row helpers.

The name -> class registry is trinity.tasks.registry, which imports the suite modules; they import this
module, never the registry."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from trinity.tasks.graders.judge import Judge
from trinity.tasks.sources import local_file_version, read_local_file
from trinity.tasks.types import MalformedRow, TaskItem

KINDS = ("code", "math", "mc", "judge")


class FilteredRow(MalformedRow):
    """A well-formed row that this configuration leaves out (prepare counts it as filtered, not malformed)."""


@dataclass(frozen=True)
class Grade:
    score: float                 # reward in [0, 1]
    extracted: str = ""          # what the extractor took from the reply
    error: str | None = None     # why grading could not run normally (judge failure, sandbox timeout...)
    repeatable: bool = True      # False: grading again may give another score (a timeout, a judge failure)


class TaskSuite(ABC):
    """A loader of raw rows, a prompt format, an answer extractor and a grader.

    `options` is the suite's config: `tasks.suite_options.<name>` merged with a few global keys
    (`local_file`, `judge_model`, `seed`). A local file, when given, replaces the suite's own source.
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    source: ClassVar[str]                  # where the rows come from (package, hub dataset)
    online: ClassVar[bool] = False         # needs the hub unless a local file is given

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options = dict(options or {})

    def judge_call(self) -> tuple[str | None, int]:
        """For a suite a judge grades (kind "judge"): (the judge model or None, its output cap), from the options
        `judge_model` and `judge_max_tokens` (default 512). The grader calls the judge with these; `trinity plan`
        counts the judge's calls with them."""
        model = self.options.get("judge_model")
        cap = self.options.get("judge_max_tokens")
        return (str(model) if model else None), int(cap) if cap is not None else 512

    # -- data
    def load_rows(self) -> list[dict[str, Any]]:
        local = self.options.get("local_file")
        if local:
            return read_local_file(local)
        return self.load_source_rows()

    @abstractmethod
    def load_source_rows(self) -> list[dict[str, Any]]:
        """Raw rows from the suite's own source (package files or hub)."""

    @property
    def version(self) -> str:
        local = self.options.get("local_file")
        return local_file_version(local) if local else self.source_version()

    def source_version(self) -> str:
        return "unknown"

    @property
    def source_name(self) -> str:
        local = self.options.get("local_file")
        return f"local:{local}" if local else self.source

    def default_split(self, row: Mapping[str, Any]) -> str | None:
        """A split the source itself fixes (e.g. LiveCodeBench release versions); None: seeded split."""
        split = row.get("split") if isinstance(row, Mapping) else None
        return split if split in ("train", "validation", "test") else None

    @abstractmethod
    def to_item(self, row: Mapping[str, Any]) -> TaskItem:
        """Raise MalformedRow when the row cannot become an item."""

    @abstractmethod
    def format_prompt(self, row: Mapping[str, Any]) -> str:
        """The prompt shown to pool models; it states the answer format."""

    # -- grading
    @abstractmethod
    def extract(self, reply: str) -> str:
        """The final answer (or program) a reply commits to."""

    @abstractmethod
    async def grade_detail(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> Grade:
        """Score and diagnostics."""

    async def grade(self, item: TaskItem, reply: str, *, judge: Judge | None = None) -> float:
        """Reward in [0, 1] for `reply` as the final answer to `item`."""
        if not reply:
            return 0.0
        return float((await self.grade_detail(item, reply, judge=judge)).score)

    # -- helpers for subclasses
    def item(self, item_id: Any, prompt: str, reference: Any, **meta: Any) -> TaskItem:
        if item_id is None or str(item_id).strip() == "":
            raise MalformedRow(f"{self.name}: row has no id")
        if not prompt or not prompt.strip():
            raise MalformedRow(f"{self.name}/{item_id}: empty prompt")
        return TaskItem(suite=self.name, item_id=str(item_id), prompt=prompt, reference=reference, meta=meta)


def require(row: Mapping[str, Any], *keys: str, suite: str = "") -> list[Any]:
    """The values of `keys`, raising MalformedRow when one is missing or empty."""
    if not isinstance(row, Mapping) or "_malformed" in row:
        raise MalformedRow(f"{suite}: unreadable row {row.get('_malformed') if isinstance(row, Mapping) else row!r}")
    values = []
    for key in keys:
        value = row.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise MalformedRow(f"{suite}: row lacks '{key}'")
        values.append(value)
    return values


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class SuiteSettings:
    """Where a suite's options come from: the typed `tasks` section (suite_options, online, local_files,
    judge_model), the root seed, and the pool model that judges when tasks.judge_model is null (the pool's
    first). trinity.pipeline.suites reads them from a whole config."""
    tasks: Any                        # trinity.config_schema.tasks.TasksConfig, or None: no tasks section
    seed: int = 0
    default_judge: str | None = None


def suite_options(settings: SuiteSettings | None, name: str) -> dict[str, Any]:
    """Options for suite `name`: tasks.online.<name> and tasks.suite_options.<name>, its local file, the judge
    model and the seed."""
    if settings is None:
        return {}
    t = settings.tasks
    options: dict[str, Any] = {}
    if t is not None:
        for given in (t.online, t.suite_options):   # tasks.online.<suite> kept for the hub suites' settings
            options.update(dict(given.get(name) or {}))
        if t.local_files.get(name):
            options["local_file"] = str(t.local_files[name])
    judge = (t.judge_model if t is not None else None) or settings.default_judge
    if judge:
        options.setdefault("judge_model", str(judge))
    options.setdefault("seed", int(settings.seed))
    return options
