"""The suite registry: suite name -> TaskSuite class, written out (tasks.train / tasks.transfer name keys),
plus the suites other installed packages add through the `trinity.suites` entry point group.

The suite modules import trinity.tasks.base, never this module, so importing it is enough to find every
built-in suite: there is no registration step and nothing to load first. A plugin is one entry point,
`<suite name> = "<module>:<TaskSuite subclass>"`, in the plugin package's metadata; it is looked up only
when a name is not built in (or when every name is listed) and imported only when its suite is used, so a
broken plugin fails only the runs that name it, with a PluginError that names the entry point and package.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from trinity.errors import ConfigError, TrinityError
from trinity.tasks.base import KINDS, SuiteSettings, TaskSuite, suite_options
from trinity.tasks.suites_code import BigCodeBench, HumanEval
from trinity.tasks.suites_judge import MTBench
from trinity.tasks.suites_math import AIME, AIME2024, AIME2025, GSM8K, MATH500
from trinity.tasks.suites_mc import MMLU, GPQADiamond
from trinity.tasks.suites_online import MBPP, RLPR, LiveCodeBench, MATH500Full

SUITES: dict[str, type[TaskSuite]] = {
    # offline: data that PyPI packages ship
    "mmlu": MMLU,
    "gpqa_diamond": GPQADiamond,
    "gsm8k": GSM8K,
    "math500": MATH500,
    "aime2024": AIME2024,
    "aime2025": AIME2025,
    "aime": AIME,
    "humaneval": HumanEval,
    "bigcodebench": BigCodeBench,
    "mtbench": MTBench,
    # hub-only (or a local file in tasks.local_files)
    "livecodebench": LiveCodeBench,
    "mbpp": MBPP,
    "math500_full": MATH500Full,
    "rlpr": RLPR,
}


ENTRY_POINT_GROUP = "trinity.suites"


class PluginError(TrinityError):
    """A `trinity.suites` entry point that cannot be used: it fails to import, is not a TaskSuite, or clashes."""


def _where(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    package = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "unknown"
    return f"entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}, package {package})"


def _folder_stamp(path: str) -> tuple[str, int, int]:
    """A folder's change time and link count (a package's new dist-info folder adds a link even within the
    clock tick of the last change)."""
    try:
        st = os.stat(path or ".")
    except OSError:
        return path, -1, -1
    return path, st.st_mtime_ns, st.st_nlink


@functools.lru_cache(maxsize=1)
def _listed(lister: Callable[..., Any], stamps: tuple[tuple[str, int, int], ...]) -> tuple[EntryPoint, ...]:
    return tuple(lister(group=ENTRY_POINT_GROUP))


def _group_entry_points() -> tuple[EntryPoint, ...]:
    """The group's entry points, listed again only when a folder on sys.path changed (installing or removing a
    package changes the folder that holds it): listing reads every installed package's metadata, about 25 ms
    here, at every config check."""
    return _listed(entry_points, tuple(_folder_stamp(p) for p in sys.path))


def plugin_entry_points() -> dict[str, EntryPoint]:
    """Suite name -> entry point, for every installed package that adds suites; nothing is imported."""
    found: dict[str, EntryPoint] = {}
    for ep in _group_entry_points():
        if ep.name in SUITES:
            raise PluginError(f"{_where(ep)} names the built-in suite '{ep.name}'; give the plugin's suite "
                              "another name")
        if ep.name in found and found[ep.name].value != ep.value:
            raise PluginError(f"two plugins add suite '{ep.name}': {_where(found[ep.name])} and {_where(ep)}")
        found[ep.name] = ep
    return found


_LOADED: dict[tuple[str, str], type[TaskSuite]] = {}


def load_plugin(ep: EntryPoint) -> type[TaskSuite]:
    """The TaskSuite subclass an entry point names, imported once per process and checked."""
    key = (ep.name, ep.value)
    if key in _LOADED:
        return _LOADED[key]
    try:
        cls = ep.load()
    except Exception as e:  # whatever the plugin's import raises, the user needs to know which plugin it was
        raise PluginError(f"task suite plugin failed to load: {_where(ep)}: {type(e).__name__}: {e}") from e
    if not (isinstance(cls, type) and issubclass(cls, TaskSuite)):
        raise PluginError(f"{_where(ep)} is {cls!r}, not a subclass of trinity.tasks.TaskSuite")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise PluginError(f"{_where(ep)}: {cls.__name__} leaves abstract methods unimplemented: {missing}")
    if getattr(cls, "name", None) != ep.name:
        # items carry the class's name and are looked up again by it, so the two must agree
        raise PluginError(f"{_where(ep)}: {cls.__name__}.name is {getattr(cls, 'name', None)!r}, "
                          f"not the entry point's name '{ep.name}'")
    if getattr(cls, "kind", None) not in KINDS:
        raise PluginError(f"{_where(ep)}: {cls.__name__}.kind is {getattr(cls, 'kind', None)!r}; "
                          f"one of {', '.join(KINDS)}")
    _LOADED[key] = cls
    return cls


def suite_names() -> list[str]:
    """Every suite a config may name: the built-in ones and those of installed plugins."""
    return sorted({*SUITES, *plugin_entry_points()})


def suite_class(name: str) -> type[TaskSuite]:
    if name in SUITES:
        return SUITES[name]
    plugins = plugin_entry_points()
    if name not in plugins:
        raise ConfigError(f"unknown task suite '{name}'; known: {', '.join(sorted({*SUITES, *plugins}))} "
                          f"(a package adds suites through the '{ENTRY_POINT_GROUP}' entry point group)")
    return load_plugin(plugins[name])


def get_suite(name: str, settings: SuiteSettings | None = None, **overrides: Any) -> TaskSuite:
    """An instance of suite `name`, configured from `settings` (optional; trinity.pipeline.suites.suite_for
    builds them from a whole config) and keyword overrides."""
    options = suite_options(settings, name)
    options.update(overrides)
    return suite_class(name)(options)
