"""The ablate stage end to end: the default variants at the main budget, and the stage on a scripted pool
with a tiny random backbone (real rollouts, real evolution loop, real coordinator save/load), including a
resume after an interruption and a last-token variant that never reads the default position's states.
Variant configs and their validation: tests/unit/test_ablations.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from stage_support import scripted  # noqa: F401  (fixture: a composed config on a scripted pool)

from trinity import config
from trinity.pipeline.workspace import timings_dir

pytestmark = pytest.mark.integration


DEFAULT_VARIANTS = ["random_search", "reinforce", "no_thinker", "no_roles", "last_token", "svf"]


# ---------------------------------------------------------------------- configuration


def test_default_variants_are_the_papers_ablations_at_the_main_budget():
    assert not config.compose(["experiment=local_live"]).ablations.enabled   # the live pool cannot afford them
    # the embedded default (a recording) trains them, all but two, and the paper's fitness:
    recorded = config.compose()
    assert list(recorded.ablations.variants) == ["random_search", "reinforce", "no_roles", "last_token",
                                                 "entropy_bonus", "sampled_fitness"]
    paper_fitness = config.ablation_variants(recorded)
    assert recorded.evolve.fitness.entropy_weight == 0.0 and recorded.evolve.fitness.estimate == "auto"
    assert paper_fitness["entropy_bonus"].evolve.fitness.entropy_weight == 0.15
    assert paper_fitness["sampled_fitness"].evolve.fitness.estimate == "sampled"
    cfg = config.compose(["experiment=local_live", "ablations.enabled=true"])
    assert cfg.ablations.enabled and list(cfg.ablations.variants) == DEFAULT_VARIANTS
    variants = config.ablation_variants(cfg)
    assert list(variants) == DEFAULT_VARIANTS
    assert variants["random_search"].evolve.strategy == "random_search"
    assert variants["reinforce"].evolve.strategy == "reinforce"
    assert list(variants["no_thinker"].coordinator.roles) == ["worker", "verifier"]
    assert list(variants["no_roles"].coordinator.roles) == ["worker"]
    assert variants["last_token"].coordinator.token_position == -1
    svf = variants["svf"].coordinator.svf
    assert svf.enabled and len(svf.matrices) == 7 and all(".layers.28." in m for m in svf.matrices)
    for v in variants.values():  # same budget as the main run; the section itself is dropped
        assert "ablations" not in v
        for key in ("popsize", "generations", "episodes_per_candidate", "validation"):
            assert v.evolve[key] == cfg.evolve[key]
    assert list(cfg.coordinator.roles) == ["worker", "thinker", "verifier"]  # the main config is untouched


# ---------------------------------------------------------------------- the stage on a scripted pool


def test_ablate_stage_end_to_end_and_resume(scripted):  # noqa: F811
    from trinity.assembly.coordinator import load_coordinator
    from trinity.coordinator.saved import CoordinatorMismatchError
    from trinity.pipeline import ablate_stage, evolve_stage

    cfg, pools = scripted
    lines: list[str] = []

    def interrupt(info):
        lines.append(info["line"])
        if info["variant"] == "last_token" and info["generation"] == 0:
            raise KeyboardInterrupt  # killed after last_token's first generation was committed

    with pytest.raises(KeyboardInterrupt):
        ablate_stage.run(cfg, progress=interrupt)
    assert any(line.startswith("ablation 1/4 reinforce: ") for line in lines)
    assert any(line.startswith("ablation 3/4 last_token: ") for line in lines)
    first_run_pools = len(pools)

    out = ablate_stage.run(cfg, progress=lambda info: lines.append(info["line"]))
    metrics = json.loads((Path(cfg.paths.metrics) / "ablations.json").read_text())
    assert out["metrics"] == json.loads(json.dumps(metrics))
    assert list(metrics["variants"]) == ["reinforce", "no_roles", "last_token", "svf"]
    assert metrics["budget"]["train_episodes_per_generation"] == 4 * 2 and metrics["budget"]["generations"] == 2
    # finished variants come back from their checkpoints without a single pool call
    rerun = dict(zip(["reinforce", "no_roles", "last_token", "svf"], pools[first_run_pools:], strict=False))
    assert rerun["reinforce"].count == 0 and rerun["no_roles"].count == 0
    # whether a variant resumed is a run fact, outside the metrics (a warm rerun writes the same metrics)
    assert all("resumed" not in v for v in metrics["variants"].values())
    resumed = {name: json.loads((timings_dir(cfg, "ablations", name) / "wall.json").read_text())["resumed"]
               for name in metrics["variants"]}
    assert resumed == {"reinforce": True, "no_roles": True, "last_token": True, "svf": False}

    root = Path(cfg.paths.ablations)
    variants = ablate_stage.variants(cfg)
    run_dirs = {evolve_stage.run_dir(v) for _, v in variants.values()}
    assert len(run_dirs) == 4  # each variant has its own checkpoint folder
    for name, (overrides, _) in variants.items():
        folder = root / name
        assert {"coordinator.safetensors", "coordinator.json", "variant.yaml", "generations.parquet",
                "summary.json", "routing.parquet", "routing.png"} <= {p.name for p in folder.iterdir()}
        assert ablate_stage.load_overrides(folder) == overrides
        gens = pl.read_parquet(folder / "generations.parquet")
        assert gens.height == 2
        # x0 and both generations validated with both routing modes: exactly the budgeted validation episodes
        validation = pl.read_parquet(folder / "episodes.parquet").filter(pl.col("phase") == "validation")
        assert validation.height == metrics["budget"]["validation_episodes"] == (1 + 2) * 2 * 2
        assert pl.read_parquet(folder / "routing.parquet")["generation"].unique().sort().to_list() == [-1, 0, 1]
        row = metrics["variants"][name]
        assert row["x0_validation_reward"] is not None and row["beats_x0"] in (True, False)
        assert row["final_validation_reward"] == gens["validation_reward"].drop_nulls()[-1]
        assert row["generations_completed"] == 2 and row["episodes"] >= 2 * 4 * 2
        loaded, params = load_coordinator(folder / "coordinator.safetensors",
                                          config.typed(config.apply_overrides(cfg, overrides, where=f"variant {name}")))
        assert params.size == loaded.num_params
    assert metrics["variants"]["reinforce"]["strategy"] == "reinforce"
    reinforce = pl.read_parquet(root / "reinforce" / "generations.parquet")
    # REINFORCE has no sigma: it reports its own step, the learning rate (evolve.reinforce: code default)
    assert reinforce["sigma"].is_null().all() and (reinforce["learning_rate"] == 0.001).all()

    # no roles: every turn a Worker turn; the saved head refuses the default roles
    episodes = pl.read_parquet(root / "no_roles" / "episodes.parquet")
    assert set(episodes["roles"].explode().drop_nulls()) == {"worker"}
    with pytest.raises(CoordinatorMismatchError, match="roles"):
        load_coordinator(root / "no_roles" / "coordinator.safetensors", config.typed(cfg))
    with pytest.raises(CoordinatorMismatchError, match="token_position"):
        load_coordinator(root / "last_token" / "coordinator.safetensors", config.typed(cfg))
    svf_meta = json.loads((root / "svf" / "coordinator.json").read_text())
    assert len(svf_meta["svf_matrices"]) == 7 and svf_meta["num_params"] > (3 + 3) * 32


def test_last_token_variant_never_reads_the_default_position_states(scripted):  # noqa: F811
    from trinity.pipeline import ablate_stage
    from trinity.pipeline.runtime_builder import stage_coordinator  # the coordinator a stage's runtime holds

    cfg, _ = scripted
    variants = ablate_stage.variants(cfg)
    main = stage_coordinator(cfg)
    preloaded = len(main.cache._memory)
    assert preloaded > 0  # the default token position uses the precomputed first-turn states
    svf = stage_coordinator(variants["svf"][1])
    assert len(svf.cache._memory) == 0                 # SVF: every candidate reads its own features
    # last token: cache_states wrote its position too (<suite>@-1); it preloads those and nothing else
    last = stage_coordinator(variants["last_token"][1])
    own = {k for p in Path(cfg.paths.states).glob("*@-1.json") for k in json.loads(p.read_text())["cache_keys"]}
    assert own and set(last.cache._memory) == own
    for coord in (svf, last):
        assert coord.cache.namespace != main.cache.namespace  # and their cache keys never collide
    no_roles = stage_coordinator(variants["no_roles"][1])
    assert len(no_roles.cache._memory) == preloaded and no_roles.cache.namespace == main.cache.namespace
    feature = np.ones(main.hidden_size)
    assert no_roles.head_for(np.ones(no_roles.num_params)).probabilities(feature)[1].tolist() == [1.0, 0.0, 0.0]
