"""Pool work and the generation floor: cached prompt tokens parsed from replies, per-episode decode and
prefill tokens, floor_s and efficiency on hand-built traces and through the toy evolution loop, and
`evolve.train_items` (resample | fixed)."""

from __future__ import annotations

import json
import logging

import pytest
from evolve_fixture import AGENTS, run, toy_cfg
from omegaconf import OmegaConf
from pool_client_support import chat_once, client_for
from pool_stub import StubServer, completion

from trinity import config
from trinity.episodes.protocol import _record_call
from trinity.episodes.trace import EpisodeId, Trace, Turn
from trinity.errors import ConfigError
from trinity.evolve.efficiency import (
    PoolWork,
    Throughput,
    efficiency,
    episode_work,
    floor_s,
    generation_summary,
    model_throughput,
    pool_throughputs,
    pool_work,
)
from trinity.evolve.tables import episode_row
from trinity.pipeline.items import generation_items, train_items_mode
from trinity.pool.responses import cached_prompt_tokens, parse_completion
from trinity.pool.types import CallResult
from trinity.tasks.types import TaskItem


def _turn(agent: str, *, prompt: int, completion: int, latency: float, cached_prompt: int = 0,
          cached: bool = False, called: bool = True) -> Turn:
    return Turn(0, agent, AGENTS.index(agent), "worker", False, prompt_tokens=prompt, completion_tokens=completion,
                latency_s=latency, cached=cached, called=called, cached_prompt_tokens=cached_prompt)


def _trace(*turns: Turn, item: str = "toy/0") -> Trace:
    return Trace(EpisodeId(0, 0, item), 0, list(turns))


# --- cached prompt tokens from the reply -------------------------------------------------------------

def _reply(usage: dict | None = None, **extra) -> bytes:
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 5, **(usage or {})}, **extra}
    return json.dumps(body).encode()


def test_cached_prompt_tokens_from_usage_details_or_llamacpp_timings():
    assert parse_completion(_reply(usage={"prompt_tokens_details": {"cached_tokens": 64}})).cached_prompt_tokens == 64
    assert parse_completion(_reply(timings={"cache_n": 40, "prompt_n": 60})).cached_prompt_tokens == 40
    both = _reply(usage={"prompt_tokens_details": {"cached_tokens": 64}}, timings={"cache_n": 40})
    assert parse_completion(both).cached_prompt_tokens == 64  # the OpenAI field first
    assert parse_completion(_reply()).cached_prompt_tokens == 0


@pytest.mark.parametrize("data", [
    {"usage": {"prompt_tokens_details": None}},
    {"usage": {"prompt_tokens_details": {"cached_tokens": "lots"}}},
    {"usage": {"prompt_tokens_details": []}},
    {"usage": {"prompt_tokens_details": {"cached_tokens": True}}},
    {"usage": {"prompt_tokens_details": {"cached_tokens": float("nan")}}},
    {"timings": "fast"},
    {"timings": {"cache_n": -5}},
    {"usage": None, "timings": None},
])
def test_garbage_cached_tokens_count_as_zero(data):
    assert cached_prompt_tokens(data, 100) == 0


def test_cached_tokens_never_exceed_the_prompt():
    assert cached_prompt_tokens({"timings": {"cache_n": 500}}, 100) == 100
    reply = parse_completion(_reply(usage={"prompt_tokens_details": {"cached_tokens": "30"}}))
    assert (reply.prompt_tokens, reply.cached_prompt_tokens) == (100, 30)


def test_client_carries_cached_prompt_tokens_and_a_cache_hit_is_marked(tmp_path):
    reply = completion("4", prompt_tokens=100, completion_tokens=7)
    reply.json["usage"]["prompt_tokens_details"] = {"cached_tokens": 80}
    with StubServer(lambda body: reply) as server:
        client = client_for(server, cache_path=tmp_path / "cache.sqlite")
        first = chat_once(client)
        second = chat_once(client)
    assert first.ok and not first.cached and first.cached_prompt_tokens == 80
    assert second.cached  # a response-cache hit: no pool work, whatever it says about tokens


def test_record_call_puts_cached_prompt_tokens_on_the_turn():
    turn = Turn(0, "alpha", 0, "worker", False)
    _record_call(turn, CallResult("alpha", "x", True, prompt_tokens=50, completion_tokens=3, cached_prompt_tokens=20),
                 keep_reply=False)
    assert (turn.prompt_tokens, turn.cached_prompt_tokens, turn.completion_tokens) == (50, 20, 3)


# --- pool work, floor and efficiency on hand-built traces -----------------------------------------------

def test_episode_work_counts_network_calls_only():
    trace = _trace(_turn("alpha", prompt=100, completion=20, latency=2.0, cached_prompt=30),
                   _turn("beta", prompt=80, completion=10, latency=0.01, cached=True),      # response-cache hit
                   _turn("gamma", prompt=0, completion=0, latency=0.0, called=False))     # never sent
    assert episode_work(trace) == {"decode_tokens": 20, "prefill_tokens": 70, "pool_latency_s": 2.0}
    row = episode_row(trace, phase="train", generation=0, candidate=0, candidate_fitness=0.5)
    assert (row.decode_tokens, row.prefill_tokens, row.pool_latency_s) == (20, 70, 2.0)


def test_floor_is_the_longest_episode_or_the_busiest_model():
    a = _trace(_turn("alpha", prompt=100, completion=20, latency=2.0),
               _turn("alpha", prompt=200, completion=40, latency=3.0, cached_prompt=100))
    b = _trace(_turn("beta", prompt=300, completion=10, latency=1.0),
               _turn("alpha", prompt=999, completion=999, latency=9.0, cached=True))   # a cache hit: ignored
    work = pool_work([a, b])
    assert work.decode_tokens == {"alpha": 60, "beta": 10}
    assert work.prefill_tokens == {"alpha": 200, "beta": 300}
    assert work.longest_episode_s == pytest.approx(5.0)
    slow = {"alpha": Throughput(decode_tok_s=10.0, prefill_tok_s=100.0),   # 6 s + 2 s = 8 s
            "beta": Throughput(decode_tok_s=10.0, prefill_tok_s=100.0),    # 1 s + 3 s = 4 s
            "gamma": Throughput(decode_tok_s=1.0, prefill_tok_s=1.0)}      # no work: 0 s
    assert floor_s(work, slow) == (pytest.approx(8.0), "alpha")
    fast = {m: Throughput(1000.0, 1000.0) for m in AGENTS}
    assert floor_s(work, fast) == (pytest.approx(5.0), "episode")
    summary = generation_summary([a, b], slow)
    assert summary["decode_tokens"] == 70 and summary["prefill_tokens"] == 500
    assert summary["floor_s"] == pytest.approx(8.0) and summary["floor_bound"] == "alpha"
    assert efficiency(8.0, 16.0) == pytest.approx(0.5)


def test_unknown_throughput_leaves_the_model_out_and_none_known_means_no_floor():
    trace = _trace(_turn("alpha", prompt=100, completion=100, latency=1.0),
                   _turn("beta", prompt=100, completion=1000, latency=1.0))
    work = pool_work([trace])
    assert floor_s(work, {"alpha": Throughput(10.0, 100.0), "beta": None}) == (pytest.approx(11.0), "alpha")
    assert floor_s(work, {"alpha": None, "beta": None}) == (None, None)
    assert floor_s(work, {}) == (None, None)
    assert floor_s(pool_work([]), {"alpha": Throughput(10.0, 100.0)}) == (None, None)   # no episodes
    assert efficiency(None, 10.0) is None and efficiency(3.0, None) is None and efficiency(3.0, 0.0) is None


def test_all_cache_hits_or_replayed_replies_do_no_work_and_have_no_floor():
    """No call reached a server: there is no least time to compare the wall time with (on a recording the
    floor of the live pool against the replay's wall time printed an efficiency of 2,920,157%)."""
    from trinity.evolve.generation_report import _floor

    cached = _trace(_turn("alpha", prompt=100, completion=100, latency=0.3, cached=True))
    replayed_turn = _turn("alpha", prompt=100, completion=100, latency=40.0)
    replayed_turn.replayed = True
    for trace in (cached, _trace(replayed_turn)):
        summary = generation_summary([trace], {"alpha": Throughput(10.0, 100.0)})
        assert summary == {"decode_tokens": 0, "prefill_tokens": 0, "floor_s": None, "floor_bound": None}
        assert efficiency(summary["floor_s"], 1.0) is None
        assert _floor(summary) == " | no pool call (replayed or cached)"
    live = generation_summary([_trace(_turn("alpha", prompt=100, completion=100, latency=0.3))],
                              {"alpha": Throughput(10.0, 100.0)})
    assert live["floor_s"] > 0 and "eff" in _floor({**live, "efficiency": efficiency(live["floor_s"], 20.0)})


def test_throughput_lookup_from_the_pool_config():
    from trinity.config_schema import section
    from trinity.config_schema.pool import PoolConfig, PoolModel

    pool = section({"models": {
        "alpha": {"throughput": {"decode_tok_s": 12.5, "prefill_tok_s": 150}},
        "beta": {"throughput": {"decode_tok_s": None, "prefill_tok_s": 150}},
        "gamma": {}}}, PoolConfig, "pool")
    got = pool_throughputs(pool, cores=1)
    assert list(got) == ["alpha", "beta", "gamma"]
    # no model writes n_threads (none is a local server): the schema's default n_threads shares no cores
    assert got["alpha"] == Throughput(12.5, 150.0) and got["beta"] is None and got["gamma"] is None
    assert model_throughput(PoolModel()) is None
    with pytest.raises(ConfigError, match="decode_tok_s"):
        section({"throughput": {"decode_tok_s": 0, "prefill_tok_s": 1}}, PoolModel, "pool.models.m")
    assert model_throughput(None) is None and pool_throughputs(None) == {}


# --- through the evolution loop ------------------------------------------------------------------------

def _with_throughput(cfg, rates):
    return config.with_values(cfg, {f"pool.models.{name}": {"throughput": {"decode_tok_s": d, "prefill_tok_s": p}}
                                    for name, (d, p) in rates.items()})


def test_generation_rows_progress_and_metrics_report_the_floor(tmp_path, caplog):
    cfg = _with_throughput(toy_cfg(generations=2, popsize=4, every=1, tmp=tmp_path),
                           {a: (1000.0, 10000.0) for a in AGENTS})
    reports = []
    with caplog.at_level(logging.INFO, logger="trinity.evolve"):
        result = run(tmp_path / "run", cfg, progress=reports.append)
    import polars as pl

    gens = pl.read_parquet(result.paths.generations)
    episodes = pl.read_parquet(result.paths.episodes)
    assert gens["floor_s"].null_count() == 0 and gens["efficiency"].null_count() == 0
    assert (gens["efficiency"] > 0).all() and set(gens["floor_bound"]) <= {"episode", *AGENTS}
    # the generation's pool work is the sum over its training and validation episodes
    for g in (0, 1):
        rows = episodes.filter(pl.col("generation") == g)
        row = gens.filter(pl.col("generation") == g).row(0, named=True)
        assert row["decode_tokens"] == rows["decode_tokens"].sum()
        assert row["prefill_tokens"] == rows["prefill_tokens"].sum()
        assert row["floor_s"] >= rows["pool_latency_s"].max() - 1e-9
    # the toy's cache hits are no pool work
    assert (episodes["decode_tokens"] <= episodes["completion_tokens"]).all()
    assert (episodes.filter(pl.col("cache_hits") == pl.col("calls"))["decode_tokens"] == 0).all()
    assert "floor" in reports[-1]["line"] and reports[-1]["efficiency"] == gens["efficiency"][-1]
    assert reports[0]["event"] == "x0" and reports[0]["floor_s"] is not None
    # measured, so a run fact: in the run folder's timings.json, not in the metrics DVC hashes
    timings = json.loads(result.paths.timings.read_text())
    assert timings["median_efficiency"] == pytest.approx(float(gens["efficiency"].median()))
    assert timings["wall_s"] > 0 and "median_efficiency" not in json.loads(result.paths.metrics.read_text())


def test_without_throughput_the_floor_is_unknown(tmp_path):
    reports = []
    result = run(tmp_path / "run", toy_cfg(generations=1, popsize=4, every=1, tmp=tmp_path), progress=reports.append)
    import polars as pl

    gens = pl.read_parquet(result.paths.generations)
    assert gens["floor_s"].to_list() == [None] and gens["efficiency"].to_list() == [None]
    assert gens["decode_tokens"][0] > 0
    assert "floor ?" in reports[-1]["line"]
    assert json.loads(result.paths.timings.read_text())["median_efficiency"] is None


# --- evolve.train_items -------------------------------------------------------------------------------

def _items() -> list[TaskItem]:
    return [TaskItem(suite, str(i), f"q{i}", None) for suite in ("a", "b", "c") for i in range(20)]


def _items_cfg(mode=None):
    """A config with evolve.train_items = `mode`; None: a document without the key (the schema's default)."""
    doc = config.compose(["experiment=local_live", "seed=7", "evolve.episodes_per_candidate=6"])
    OmegaConf.set_struct(doc, False)
    if mode is None:
        del doc.evolve["train_items"]
    else:
        doc.evolve.train_items = mode
    return config.typed(doc)


def test_fixed_train_items_are_the_same_every_generation():
    items = _items()
    fixed = [[it.uid for it in generation_items(_items_cfg("fixed"), items, g)] for g in range(4)]
    assert all(f == fixed[0] for f in fixed) and len(fixed[0]) == 6
    assert {uid.split("/")[0] for uid in fixed[0]} == {"a", "b", "c"}   # still balanced over suites
    resample = [[it.uid for it in generation_items(_items_cfg("resample"), items, g)] for g in range(4)]
    assert len({tuple(r) for r in resample}) > 1
    assert resample[0] == fixed[0]      # fixed = generation 0's sample, so the two modes share its calls
    default = [[it.uid for it in generation_items(_items_cfg(), items, g)] for g in range(4)]
    assert default == resample


def test_a_bad_train_items_value_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="evolve.train_items"):
        generation_items(_items_cfg("sometimes"), _items(), 0)
    assert train_items_mode(_items_cfg(None)) == "resample"
    with pytest.raises(ConfigError, match="evolve.train_items"):
        config.compose(["experiment=local_live", "evolve.train_items=sometimes"])
    assert config.compose(["experiment=local_live", "evolve.train_items=fixed"]).evolve.train_items == "fixed"
    assert config.compose(["experiment=paper", "evolve=random_search"]).evolve.train_items == "resample"


def test_pool_throughput_config_is_validated():
    cfg = config.load(None, ["experiment=local_live", "pool=local"])
    assert all(m.throughput.decode_tok_s > 0 for m in cfg.pool.models.values())   # measured, committed
    ok = config.load(None, ["experiment=local_live", "pool=local",
                            "pool.models.smollm2-135m.throughput.decode_tok_s=40.5",
                            "pool.models.smollm2-135m.throughput.prefill_tok_s=300"])
    # three one-thread servers on two cores: each had 2/3 of a core under the measurement's full load
    assert pool_throughputs(ok.pool, cores=2)["smollm2-135m"] == Throughput(40.5, 300.0, 2 / 3, 1.0)
    for bad in ("pool.models.smollm2-135m.throughput.decode_tok_s=-1",
                "pool.models.smollm2-135m.throughput.prefill_tok_s=fast",
                "+pool.models.smollm2-135m.throughput.decoding=3"):
        with pytest.raises(ConfigError, match="pool.models.smollm2-135m.throughput"):
            config.compose(["experiment=local_live", "pool=local", bad])


def test_local_servers_floor_counts_shared_cores():
    """A lone busy local model runs faster than its loaded rate; the floor stays a lower bound."""
    tp = {"a": Throughput(10.0, 1e9, loaded_cores=2 / 3, max_cores=1.0),
          "b": Throughput(10.0, 1e9, loaded_cores=2 / 3, max_cores=1.0),
          "c": Throughput(10.0, 1e9, loaded_cores=2 / 3, max_cores=1.0)}
    alone = PoolWork({"a": 300}, {"a": 0}, longest_episode_s=1.0)   # 30 s at the loaded rate
    assert floor_s(alone, tp) == (pytest.approx(20.0), "a")          # 20 core-seconds on its one core
    busy = PoolWork({"a": 300, "b": 300, "c": 300}, {}, longest_episode_s=1.0)
    assert floor_s(busy, tp) == (pytest.approx(30.0), "cpu")         # 60 core-seconds on two cores
    hosted = {"h": Throughput(10.0, 1e9)}
    assert floor_s(PoolWork({"h": 300}, {}, longest_episode_s=1.0), hosted) == (pytest.approx(30.0), "h")
