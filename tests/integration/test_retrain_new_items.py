"""Scheduled retraining learns from new items: retrain.new_items records that many more items per suite and
split into the recording before the run trains (record_stage.extend, real recorder and pool client over a
loopback stub), and the items every later stage uses are the grown recording's."""

from __future__ import annotations

import collections

import pytest
from pool_stub import StubServer, stub_pool_mapping
from recording_support import MODELS, grade, make_recording, reply_for

from trinity.config import with_values

pytestmark = pytest.mark.integration


def _held(root) -> collections.Counter:
    from trinity.record import store

    return collections.Counter((it["split"], it["suite"]) for it in store.read_manifest(root)["items"])


def test_extend_records_only_the_new_items_and_the_stages_then_use_them(tmp_path):
    from trinity.pipeline import record_stage
    from trinity.pipeline.items import load_split
    from trinity.pool.client import PoolClient

    cfg, root, first = make_recording(tmp_path, roles=("worker", "verifier"))
    before = _held(root)
    assert before[("train", "gsm8k")] == 3 and before[("test", "gsm8k")] == 2
    # what the next run asks: one more train and one more test item per suite, beyond what is held
    assert record_stage.grown_items(cfg, {"train": 1, "test": 1}) == {"train": 4, "validation": 2, "test": 3}

    with StubServer(reply_for) as server:
        cfg = with_values(cfg, {"pool": stub_pool_mapping(server.base_url, models=list(MODELS))})
        grown, summary = record_stage.extend(
            cfg, {"train": 1, "test": 1}, progress=lambda _l: None, grader=grade,
            client_factory=lambda journal, known: PoolClient.from_config(cfg.pool, cache_path=journal,
                                                                                replay=known))
        asked = server.count
    after = _held(root)
    assert after - before == collections.Counter({("train", "gsm8k"): 1, ("test", "gsm8k"): 1})
    assert summary["recorded"] == 2 and asked > 0
    assert (grown.record.items.train, grown.record.items.validation, grown.record.items.test) == (4, 2, 3)
    # a replaying stage now sees the grown recording's items (and only those)
    replay = with_values(grown, {"pool.replay": {"recording": str(root), "on_miss": "error"}})
    assert len(load_split(replay, ["gsm8k"], "train")) == 4
    assert len(load_split(replay, ["gsm8k"], "test")) == 3
    # nothing new asked: nothing recorded, no call
    with StubServer(reply_for) as idle:
        cfg = with_values(cfg, {"pool": stub_pool_mapping(idle.base_url, models=list(MODELS))})
        _, again = record_stage.extend(
            grown, {}, progress=lambda _l: None, grader=grade,
            client_factory=lambda journal, known: PoolClient.from_config(cfg.pool, cache_path=journal, replay=known))
        assert idle.count == 0 and again["recorded"] == 0


def test_the_retrain_flow_asks_for_new_items_only_on_a_recording():
    from flows.retrain import record_new_items
    from trinity import config

    said: list[str] = []
    live = config.load(None, ["experiment=local_live", "retrain.new_items.train=2"])
    assert record_new_items(live, said.append) is live and "applies to a recording" in said[-1]
    none = config.load(None, ["retrain.new_items.train=0"])
    assert record_new_items(none, said.append) is none and "nothing new to learn" in said[-1]
