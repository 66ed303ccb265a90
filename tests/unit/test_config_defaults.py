"""Defaults live in one place: a key the root config's defaults list sets (conf/config.yaml composed with no
experiment) holds the schema's own default (trinity/config_schema), so a config file that leaves the key out
gets the same value as one that copies the default file. The exceptions are content, not defaults: which
models a pool has, which backbone, which suites, the prompt texts and the ablation definitions."""

import dataclasses
import enum

from omegaconf import OmegaConf

from trinity import config
from trinity.config_schema import TrinityConfig

# keys whose value in conf/ is the chosen option's content; the schema only types them
CONTENT = {
    "pool": "the chosen pool (conf/pool/*.yaml): its name, provider, models and caps",
    "coordinator.backbone": "the chosen backbone (conf/coordinator/*.yaml)",
    "tasks.train": "the chosen suites (conf/tasks/*.yaml)",
    "tasks.transfer": "the chosen suites",
    "tasks.suite_options": "options of the chosen suites",
    "tasks.online": "the chosen online suites",
    "protocol.coordinator_system": "prompt text (conf/protocol/default.yaml)",
    "protocol.collaboration_instructions": "prompt text",
    "protocol.worker_system": "prompt text",
    "protocol.thinker_system": "prompt text",
    "protocol.verifier_system": "prompt text",
    "eval.moa.aggregator_system": "prompt text (conf/eval/default.yaml)",
    "coordinator.features.normalize": "conf/coordinator chooses rebalance; a saved config from before the key "
                                      "existed keeps the raw features it was trained on (none)",
    "serve.roles": "the role policy, spelled out per role (the same as none)",
    "ablations": "the ablation variants and their definitions (conf/ablations/default.yaml)",
}


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _disagreements(schema_obj, node, key=""):
    out = []
    for f in dataclasses.fields(schema_obj):
        if f.name not in node:
            continue
        sub = f"{key}.{f.name}" if key else f.name
        if any(sub == c or sub.startswith(c + ".") for c in CONTENT):
            continue
        default, value = getattr(schema_obj, f.name), node[f.name]
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            out += _disagreements(default, value, sub)
        elif isinstance(value, str) and "${" in value:
            continue   # an interpolation (paths): resolved against the run's own folders
        elif _plain(default) != value:
            out.append(f"{sub}: schema {_plain(default)!r}, conf {value!r}")
    return out


def test_the_default_files_and_the_schema_hold_the_same_defaults():
    composed = OmegaConf.to_container(config.compose(["~experiment"], validate_cfg=False), resolve=False)
    assert _disagreements(TrinityConfig(), composed) == []


def test_a_changed_default_is_found():
    composed = OmegaConf.to_container(config.compose(["~experiment", "evolve.validation.n_items=7"],
                                                     validate_cfg=False), resolve=False)
    assert _disagreements(TrinityConfig(), composed) == ["evolve.validation.n_items: schema 64, conf 7"]
