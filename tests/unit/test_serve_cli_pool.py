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
