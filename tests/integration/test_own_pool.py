"""A recording alone replays as the pool it was made from (`pool=replay record.name=<it>`, docs/RECORDINGS.md), on
loopback: two OpenAI-compatible servers (real HTTP; one model each, as two hosted providers would be) are recorded
once with `trinity record`'s stage; then `pool=replay` reads the pool from the recording's manifest and the
pipeline trains and evaluates on the replay with zero pool calls; then the trained coordinator is served over
the live pool (trinity.config.live_pool, as `trinity serve` does) and answers through both servers' models.
docs/OWN_POOL.md's own commands, as printed: tests/integration/test_own_pool_journey.py."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from pool_stub import StubServer, stub_pool_mapping, typed_pool
from recording_support import SUITE, grade, recording_cfg, reply_for, write_prepared

from trinity import config
from trinity.config import compose, load, with_values
from trinity.errors import ConfigError

pytestmark = pytest.mark.integration


def test_record_once_train_on_the_replay_then_serve_the_live_pool(tmp_path, tiny_backbone_overrides, monkeypatch):
    from trinity.pipeline import cache_states_stage, evaluate_stage, evolve_stage, record_stage
    from trinity.pool.client import PoolClient
    from trinity.serve.server import ServerThread, build_app

    monkeypatch.delenv("TRINITY_SERVE_TOKEN", raising=False)
    write_prepared(tmp_path / "prepared", {"train": 4, "validation": 3, "test": 3})
    with StubServer(reply_for) as big, StubServer(reply_for) as small:
        cfg = recording_cfg(tmp_path, big.base_url, roles=("worker", "verifier"),
                            overrides=tuple(tiny_backbone_overrides))
        pool = stub_pool_mapping(big.base_url, models=["m-big", "m-small"], retry={"max_retries": 0})
        pool["models"]["m-small"]["base_url"] = small.base_url
        pool["name"] = "my-hosted"
        cfg = with_values(cfg, {"pool": pool, "record.name": "my-hosted"})
        record_stage.run(cfg, progress=lambda _l: None, grader=grade,
                         client_factory=lambda journal, known: PoolClient.from_config(cfg.pool, cache_path=journal,
                                                                                replay=known))
        recorded_calls = (big.count, small.count)
        assert min(recorded_calls) > 0   # both providers were recorded

        common = ["protocol.max_turns=2", f"tasks.train=[{SUITE}]", "tasks.transfer=[]",
                  f"paths.prepared={tmp_path / 'prepared'}", f"paths.cache={tmp_path / 'cache'}",
                  f"record.dir={tmp_path / 'recordings'}", "record.roles=[worker,verifier]",
                  "coordinator.roles=[worker,verifier]", *tiny_backbone_overrides]
        with pytest.raises(ConfigError, match="record.name"):
            compose(["experiment=local_small", "pool=replay", "record.name=nothing-here", *common])
        replay = load(None, ["experiment=local_small", "pool=replay", "record.name=my-hosted", *common])
        # the pool comes from the manifest: the same models at the same servers, replayed
        assert list(replay.pool.models) == ["m-big", "m-small"]
        assert replay.pool.models["m-small"].base_url == small.base_url
        assert replay.pool.replay.recording == str(tmp_path / "recordings" / "my-hosted")
        replay = with_values(replay, {
            **{f"paths.{key}": str(tmp_path / key)
               for key in ("states", "runs", "eval", "ablations", "frontier", "metrics", "reports")},
            "evolve.popsize": 6, "evolve.generations": 3,
            "evolve.validation": {"every": 1, "n_items": 2, "select": "one_se"},
            "eval.items_per_suite": None, "eval.sets": ["test"], "eval.min_items": 2,
            "eval.methods": ["trinity", "random", "single_worker"]})
        cache_states_stage.run(replay)
        out = evolve_stage.run(replay)
        assert out["replay_misses"] == 0
        report = Path(evaluate_stage.run(replay)["report"]).read_text()
        assert (big.count, small.count) == recorded_calls   # training and evaluation asked no pool model
        assert "my-hosted" in report and "beat every single agent of its pool" in report, report[:1500]

        live = config.live_pool(replay)                        # the same pool, live
        assert live.pool.replay is None and list(live.pool.models) == ["m-big", "m-small"]
        with ServerThread(build_app(live, f"{replay.paths.runs}/coordinator")) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
            reply = client.chat.completions.create(
                model="trinity", messages=[{"role": "user", "content": "Question: what is 3 + 4?"}])
        assert reply.model_extra["trinity"]["turns"]
        assert big.count + small.count > sum(recorded_calls)   # served over the live pool


def test_a_replayed_hosted_pool_needs_no_key_unless_it_may_call_the_live_pool(tmp_path, monkeypatch):
    import json

    from trinity import config
    from trinity.record import store

    monkeypatch.delenv("MY_PROVIDER_KEY", raising=False)
    root = tmp_path / "recordings" / "hosted"
    root.mkdir(parents=True)
    pool = {"name": "hosted", "provider": "openai", "sampling": {"temperature": 0.1, "max_tokens": 64},
            "models": {"big": {"model_id": "big-1", "base_url": "https://example.invalid/v1",
                               "api_key_env": "MY_PROVIDER_KEY"}}}
    (root / store.MANIFEST).write_text(json.dumps({"format": store.FORMAT, "version": store.VERSION,
                                                   "name": "hosted", "pool_config": pool, "items": []}))
    common = ["pool=replay", f"record.dir={tmp_path / 'recordings'}", "record.name=hosted"]
    replayed = config.load(None, common)
    assert replayed.pool.models["big"].api_key_env == "MY_PROVIDER_KEY"
    config.check_api_keys(replayed)                                   # training on the replay: no key
    with pytest.raises(ConfigError, match="MY_PROVIDER_KEY"):
        config.check_api_keys(config.load(None, [*common, "pool.replay.on_miss=live"]))   # may call the pool


def test_a_replayed_pool_resolves_its_endpoints_without_a_key(monkeypatch):
    """The stages that replay a recording (states, evolution, evaluation) build the pool's endpoints to find the
    recorded replies: with `pool.replay.on_miss: error` they call no endpoint, so no key is needed (the
    guide's claim); with `on_miss: live` a missing key stops them."""
    from trinity.pool.errors import MissingApiKeyError
    from trinity.pool.providers import resolve_endpoint

    monkeypatch.delenv("MY_PROVIDER_KEY", raising=False)
    model = {"model_id": "big-1", "base_url": "https://example.invalid/v1", "api_key_env": "MY_PROVIDER_KEY"}
    written = {"name": "hosted", "provider": "openai", "models": {"big": model}}

    def endpoint(**more):
        pool = typed_pool({**written, **more})
        return resolve_endpoint("big", pool.models["big"], pool)

    replayed = endpoint(replay={"recording": "r", "on_miss": "error"})
    assert replayed.model_id == "big-1"
    with pytest.raises(MissingApiKeyError, match="MY_PROVIDER_KEY"):
        endpoint(replay={"recording": "r", "on_miss": "live"})
    with pytest.raises(MissingApiKeyError, match="MY_PROVIDER_KEY"):
        endpoint()                                  # the live pool
