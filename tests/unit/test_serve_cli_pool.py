"""`trinity serve`'s pool check, in process: the difference between two pools names their order, count
and names. The refusals through the real command line: tests/integration/test_serve_cli.py."""

from __future__ import annotations

from trinity.serve.preflight import pool_difference


def test_pool_difference_names_order_count_and_names():
    assert pool_difference(["a", "b", "c"], ["a", "b", "c"]) is None
    assert pool_difference(["a", "b", "c"], ["a", "c", "b"]) == \
        "the order differs (the head's agent rows follow the trained order)"
    assert pool_difference(["a", "b", "c"], ["a", "b"]) == \
        "it was trained on 3 models, this config has 2; [c] is not in this config's pool"
    assert pool_difference(["a", "b"], ["a", "x"]) == \
        "[b] is not in this config's pool; [x] was not in the pool it was trained on"
    assert pool_difference(["a"], ["a", "x", "y"]) == \
        "it was trained on 1 model, this config has 3; [x, y] were not in the pool it was trained on"


def _saved(tmp_path, models, roles=("worker", "verifier")):
    import numpy as np

    from trinity.coordinator.saved import save_params

    folder = tmp_path / "coord"
    save_params(folder / "coordinator.safetensors", np.zeros(4), {"pool_models": list(models), "roles": list(roles)})
    return folder


def test_a_replayed_pool_is_served_over_the_live_pool_it_was_recorded_from():
    """The embedded default trains on pool=recorded_agents (the agents pool replayed): `trinity serve` serves the
    same section without `replay`, the live agents, so plain `make serve` answers new questions."""
    from trinity import config

    default = config.load(None, [])
    assert default.pool.replay is not None
    live = config.live_pool(default)
    assert live.pool.replay is None and live.pool.from_recording is None
    local_agents = config.load(None, ["pool=local_agents"])
    assert list(live.pool.models) == list(default.pool.models) == list(local_agents.pool.models)
    assert config.live_pool(live) is live or config.live_pool(live) == live   # a live pool stays as it is


def test_a_pool_refusal_says_which_experiment_or_pool_to_type(tmp_path):
    import pytest

    from trinity import config
    from trinity.coordinator.saved import CoordinatorMismatchError
    from trinity.serve.preflight import check_saved_pool

    agents = list(config.load(None, []).pool.models)
    with pytest.raises(CoordinatorMismatchError) as refused:
        check_saved_pool(config.load(None, ["pool=local"]), _saved(tmp_path, agents))
    message = str(refused.value)
    assert "experiment=local_agents" in message and "pool=local_agents" in message and "nothing was started" in message
    unknown = _saved(tmp_path, ["mine-a", "mine-b"])
    with pytest.raises(CoordinatorMismatchError, match="No pool file in conf/pool has these models"):
        check_saved_pool(config.load(None, ["pool=local"]), unknown)


def test_a_coordinator_trained_with_other_roles_is_refused_before_anything_starts(tmp_path):
    import pytest

    from trinity import config
    from trinity.coordinator.saved import CoordinatorMismatchError
    from trinity.serve.preflight import check_saved_pool

    cfg = config.load(None, [])                       # the default: Worker and Verifier
    check_saved_pool(cfg, _saved(tmp_path, list(cfg.pool.models)))
    with pytest.raises(CoordinatorMismatchError) as refused:
        check_saved_pool(cfg, _saved(tmp_path, list(cfg.pool.models), roles=("worker", "thinker", "verifier")))
    assert "coordinator.roles [worker, thinker, verifier]; this config has [worker, verifier]" in str(refused.value)
    assert "experiment=<name>" in str(refused.value)
