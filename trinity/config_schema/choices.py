"""The closed choices of the configuration, one enum each. Values are the strings users write; a
value outside an enum is a ConfigError naming the key, raised when the config is composed or loaded.
Open choices that come from a registry (strategies, suites) are checked against the registry when the
config is composed (trinity.config.check_registry_names), so the schema imports nothing above it."""

from __future__ import annotations

from enum import StrEnum

from trinity.contracts import RoutingMode  # noqa: F401  (a closed choice of the config, defined with the roles)


class RunnerKind(StrEnum):
    threads = "threads"
    dask = "dask"


class ResponseCacheMode(StrEnum):
    off = "off"
    read_write = "read_write"
    replay_only = "replay_only"


class ServeCacheMode(StrEnum):
    off = "off"
    read_write = "read_write"


class TrainItems(StrEnum):
    resample = "resample"
    fixed = "fixed"


class CostUnit(StrEnum):
    usd = "usd"
    ktokens = "ktokens"


class FitnessEstimate(StrEnum):
    sampled = "sampled"   # mean over the candidate's sampled episodes (the paper)
    exact = "exact"       # expectation over a complete recording's trees (pool=recorded; trinity.record.exact)
    auto = "auto"         # exact when the pool is a recording (pool.replay), sampled on a live pool


class ValidationSelect(StrEnum):
    max = "max"                   # the highest validation reward (the paper: the best mean by validation)
    paired_gain = "paired_gain"   # replace the kept mean only on a paired gain beyond noise (trinity.evolve.selection)
    one_se = "one_se"             # the earliest mean within one paired standard error of the best


class FrontierCostUnit(StrEnum):
    auto = "auto"
    usd = "usd"
    ktokens = "ktokens"


class FeatureNormalize(StrEnum):
    none = "none"
    standardize = "standardize"
    rebalance = "rebalance"


class BackboneSource(StrEnum):
    asset = "asset"
    hub = "hub"
    gguf = "gguf"


class Dtype(StrEnum):
    auto = "auto"          # bfloat16 where the device computes it natively, else float32 (backbone.resolve_dtype)
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class Optimizer(StrEnum):
    adam = "adam"
    sgd = "sgd"


class EvalSet(StrEnum):
    validation = "validation"
    test = "test"


class PromoteRule(StrEnum):
    paired_test = "paired_test"
    always = "always"
    never = "never"


class RecordOrder(StrEnum):
    balanced = "balanced"       # round after round, one item of every (split, suite): every prefix is balanced
    test_first = "test_first"   # the test split's items first (its suites in turn), then validation, then train
