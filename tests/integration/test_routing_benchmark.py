"""Learning, on the simulated pool's `complementary` profile (known optimum): a short run of the real
pipeline code (prepare -> cache_states -> evolve with the real SmolLM2 backbone and sep-CMA-ES, the
simulated pool over loopback HTTP) must learn to route each suite to its specialist.

The margin: on this profile x0 (uniform routing) is worth 0.21 in expectation and the oracle 0.86. The
validation items are the same for x0 and every later mean (paired), so the test asks for a gain that an
exact McNemar test on those paired episodes finds significant (p < 0.05) AND of at least 0.15, a fifth of
the oracle-x0 gap. And the probability of the right model for a suite (the mean over the validation
items' first-turn features, exactly 1/5 at x0) must rise by at least 0.15 on average over the suites and
by at least 0.05 on each: in so short a run (12 generations; measured: the math specialist first takes
over both suites, the cheap global gain, then the suites separate) the right model is not yet the most
likely one on every suite, as it is after the benchmark's 60 generations (README).

The workload is sized to what the assertions read: 30 items per suite split 55/35/10 (training and the
validation items; evolution never reads the test split, whose states cache_states would still compute) and
K = 2 turns instead of the benchmark's 5 (later turns cost a backbone pass each; the routing asserted here is
the first turn's, and the second turn keeps the live later-turn features of the real backbone in the loop). The
backbone runs in `dtype=auto`: bfloat16 where the CPU computes it natively, float32 elsewhere. Measured alone on
the 2-core AVX-512 BF16 machine, seeds 0, 1 and 2 (one run each): every assertion holds in both dtypes; in
bfloat16 the smallest gain 0.636 (p <= 0.001, 16 to 22 validation items), the smallest per-suite rise 0.36, 46 to
49 s a run; in float32 the smallest gain 0.682 and rise 0.21, 72 to 77 s; the earlier K = 3 in float32 took 91 s."""

import numpy as np
import polars as pl
import pytest

from trinity import config
from trinity.assembly.local_pool import LocalPool
from trinity.pipeline import cache_states_stage, evolve_stage
from trinity.pipeline.suites import prepare_from_config
from trinity.stats import paired_test

pytestmark = pytest.mark.slow

RIGHT_MODEL = {"mmlu": "mc-specialist", "gsm8k": "math-specialist"}


def test_a_short_benchmark_run_learns_to_route_suites_to_their_specialists(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cfg = config.load(None, [
        "experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]", "tasks.max_items_per_suite=30",
        "tasks.splits={train:0.55,validation:0.35,test:0.1}", "protocol.max_turns=2", "coordinator.backbone.dtype=auto",
        "evolve.generations=12", "evolve.validation.every=4", "evolve.validation.n_items=24",
        f"paths.prepared={tmp_path / 'prepared'}", f"paths.states={tmp_path / 'states'}",
        f"paths.metrics={tmp_path / 'metrics'}", f"paths.reports={tmp_path / 'reports'}",
        f"paths.cache={tmp_path / 'cache'}", f"pool.port={port}",
    ])
    prepare_from_config(cfg, cfg.paths.prepared)
    cache_states_stage.run(cfg)
    with LocalPool(cfg.pool, progress=lambda *_: None):
        out = evolve_stage.evolve(cfg, out_dir=tmp_path / "run")
    result = out["result"]
    episodes = pl.read_parquet(tmp_path / "run" / "episodes.parquet").filter(
        (pl.col("phase") == "validation") & (pl.col("routing") == "sample"))

    def rewards(generation: int) -> list[float]:
        return episodes.filter(pl.col("generation") == generation).sort("item")["reward"].to_list()

    x0, best = rewards(-1), rewards(result.best_generation)
    test = paired_test(best, x0)
    assert result.beats_x0, (result.best_validation_reward, result.x0_validation_reward)
    assert test.difference >= 0.15 and test.p_value < 0.05, test

    routing = pl.read_parquet(tmp_path / "run" / "routing.parquet")
    last = int(routing["generation"].max())
    rises = {}
    for suite, model in RIGHT_MODEL.items():
        prob = routing.filter((pl.col("suite") == suite) & (pl.col("model") == model))
        start = prob.filter(pl.col("generation") == -1)["mean_prob"].item()
        assert start == pytest.approx(0.2, abs=1e-6)       # x0 = 0 routes uniformly
        rises[suite] = prob.filter(pl.col("generation") == last)["mean_prob"].item() - start
    assert np.mean(list(rises.values())) >= 0.15, rises
    assert all(rise >= 0.05 for rise in rises.values()), rises
    assert np.isfinite(result.best_validation_reward)
