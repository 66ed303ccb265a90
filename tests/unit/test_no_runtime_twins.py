"""The config's schema objects are what the code reads: no class outside trinity/config_schema restates a
schema dataclass's fields (a "runtime twin" whose defaults and checks drift from the schema's). A class that
shares most of a schema's field names is a twin unless it is listed here with what it adds."""

import dataclasses
import importlib
import inspect
import pkgutil

import trinity

# (schema class, other class): why the other is not a copy of the section
NOT_TWINS = {
    ("BudgetLimits", "trinity.pool.budget.Budget"): "the run's spending against the limits, not only the limits",
    ("PoolModel", "trinity.pool.providers.ModelEndpoint"): "the resolved endpoint: URL from the port, the API key "
                                                           "read from the environment, the provider's defaults",
    ("Sampling", "trinity.pool.providers.ModelEndpoint"): "the same resolved endpoint (pool-wide sampling filled in)",
    ("Backbone", "trinity.coordinator.backbone.Backbone"): "the loaded model and tokenizer",
    ("ServeLimits", "trinity.serve.schema.ChatRequest"): "one request's own values, bounded by the limits",
}
SHARE, SHARED = 0.6, 3    # a twin repeats at least this share of the schema's fields, and at least this many


def _dataclasses():
    schema, other = [], []
    for info in pkgutil.walk_packages(trinity.__path__, "trinity."):
        if info.name.endswith("llamacpp_worker"):   # a server process's entry point: importing it starts nothing,
            continue                                # but it needs the optional llama.cpp binding
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == info.name:
                (schema if info.name.startswith("trinity.config_schema") else other).append(obj)
    return schema, other


def twins(schema, other):
    found = []
    for s in schema:
        names = {f.name for f in dataclasses.fields(s)}
        for d in other:
            shared = names & {f.name for f in dataclasses.fields(d)}
            if (len(shared) >= SHARED and len(shared) / len(names) >= SHARE
                    and (s.__name__, f"{d.__module__}.{d.__name__}") not in NOT_TWINS):
                found.append(f"{s.__module__}.{s.__name__} ~ {d.__module__}.{d.__name__}: {sorted(shared)}")
    return found


def test_no_class_restates_a_config_section():
    assert twins(*_dataclasses()) == []


def test_a_restated_section_is_found():
    from trinity.config_schema.eval import MoA

    @dataclasses.dataclass(frozen=True)
    class Prompts:   # the shape the MoA prompts had as a runtime copy
        aggregator_system: str
        aggregator_format: str
        proposal_format: str

    assert len(twins([MoA], [Prompts])) == 1
