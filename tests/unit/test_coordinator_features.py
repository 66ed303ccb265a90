"""Feature statistics and `coordinator.features.normalize=standardize` on a tiny random backbone.

Covers: the prompt-dependent-share measurement (a synthetic known answer; the sampled path against the
exact one), the cache_states stage writing it, standardisation fitted on the TRAINING split's cached
states (zero mean, unit variance there), x0 = 0 still uniform, save/load keeping the statistics (used,
not recomputed), refusals of mismatched normalisation, the config check, and the REINFORCE gradient
under normalisation (finite differences, and the strategy's gradient from recorded decisions).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import polars as pl
import pytest
from coordinator_support import numeric_grad, tiny_backbone
from omegaconf import OmegaConf

from trinity import config
from trinity.assembly.coordinator import load_coordinator
from trinity.contracts import ROLES
from trinity.coordinator.feature_norm import ABS_FLOOR, FLOOR_FRACTION, FeatureNorm, FeatureNormError
from trinity.coordinator.feature_stats import feature_stats
from trinity.coordinator.head import RoutingHead
from trinity.coordinator.saved import CoordinatorMismatchError, load_saved, save_params
from trinity.errors import ConfigError
from trinity.pipeline.coordinator_setup import build_coordinator, first_turn_features
from trinity.pipeline.state_files import read_state_cache
from trinity.tasks.prepare import COLUMNS

TRAIN, TRANSFER = ["mmlu", "gsm8k"], ["gpqa_diamond"]


# ---------------------------------------------------------------------- feature_stats
def test_feature_stats_has_the_known_answer_on_synthetic_features():
    # shared c (norm 10) plus +a / -a (norm 3): suite A holds c + a twice, suite B c - a twice.
    c, a = np.array([10.0, 0, 0, 0]), np.array([0.0, 3.0, 0, 0])
    features = np.stack([c + a, c + a, c - a, c - a])
    s = feature_stats(features, ["A", "A", "B", "B"])
    assert s["count"] == 4 and s["hidden_size"] == 4
    assert np.isclose(s["mean_norm"], 10.0) and np.isclose(s["rms_deviation_norm"], 3.0)
    assert np.isclose(s["rms_norm"], np.sqrt(109.0))
    assert np.isclose(s["deviation_to_mean_ratio"], 0.3)
    assert np.isclose(s["prompt_dependent_share"], 3.0 / np.sqrt(109.0))
    assert np.isclose(s["cosine_same_suite"], 1.0)
    assert np.isclose(s["cosine_cross_suite"], 91.0 / 109.0)  # (100 - 9) / (sqrt(109)^2)
    assert (s["same_suite_pairs"], s["cross_suite_pairs"], s["pairs_sampled"]) == (2, 4, False)


def test_feature_stats_sampling_is_seeded_and_close_to_the_exact_means():
    r = np.random.default_rng(0)
    suites = [f"s{i % 3}" for i in range(300)]
    offsets = {f"s{k}": r.normal(size=16) * 2 for k in range(3)}
    features = np.stack([5.0 + offsets[s] + r.normal(size=16) for s in suites])
    exact = feature_stats(features, suites)
    sampled = feature_stats(features, suites, seed=3, max_pairs=4000, exact_max_items=10)
    assert sampled["pairs_sampled"] and sampled["same_suite_pairs"] == sampled["cross_suite_pairs"] == 4000
    assert sampled == feature_stats(features, suites, seed=3, max_pairs=4000, exact_max_items=10)
    for key in ("cosine_same_suite", "cosine_cross_suite"):
        assert abs(sampled[key] - exact[key]) < 0.01, key
    assert exact["cosine_same_suite"] > exact["cosine_cross_suite"]
    assert sampled["mean_norm"] == exact["mean_norm"]  # norms are always exact


# ---------------------------------------------------------------------- FeatureNorm
def test_feature_norm_standardises_and_floors_constant_dimensions():
    r = np.random.default_rng(1)
    f = r.normal(size=(50, 6)) * np.array([1, 2, 3, 4, 5, 6]) + 40.0
    f[:, 5] = 7.0  # a constant dimension
    norm = FeatureNorm.fit(f)
    z = norm.apply(f)
    assert np.allclose(z.mean(axis=0), 0.0, atol=1e-9)
    assert np.allclose(z[:, :5].std(axis=0), 1.0)
    assert np.all(z[:, 5] == 0.0) and norm.std[5] == max(ABS_FLOOR, FLOOR_FRACTION * float(np.median(f.std(axis=0))))
    assert norm.count == 50 and len(norm.digest) == 64
    with pytest.raises(FeatureNormError):
        FeatureNorm.fit(f[:1])


# ---------------------------------------------------------------------- a prepared + cached tiny setup
def _write_prepared(folder, suite: str, splits: list[str]) -> None:
    rows = [{"item_id": f"{i:03d}", "split": split, "prompt": f"{suite} question {i}: " + "why and how? " * (1 + i % 4),
             "reference": json.dumps("A"), "meta": "{}", "source": "test", "version": "1"}
             for i, split in enumerate(splits)]
    pl.DataFrame(rows, schema={c: pl.String for c in COLUMNS}).write_parquet(folder / f"{suite}.parquet")


def _compose(tmp, *extra):
    return config.load(None, ["experiment=local_live",
        f"tasks.train=[{','.join(TRAIN)}]", f"tasks.transfer=[{','.join(TRANSFER)}]",
        "coordinator.backbone.id=tiny-llama",
        f"paths.prepared={tmp}/prepared", f"paths.states={tmp}/states", f"paths.metrics={tmp}/metrics",
        f"paths.cache={tmp}/cache", *extra,
    ])


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Prepared items (train / validation / test), the cache_states stage run on them, and a config
    with normalize=standardize."""
    from trinity.pipeline import cache_states_stage

    tmp = tmp_path_factory.mktemp("std")
    (tmp / "prepared").mkdir()
    _write_prepared(tmp / "prepared", "mmlu", ["train"] * 7 + ["validation"] * 2 + ["test"] * 2)
    _write_prepared(tmp / "prepared", "gsm8k", ["train"] * 6 + ["validation", "test"])
    _write_prepared(tmp / "prepared", "gpqa_diamond", ["test"] * 4)
    cfg = _compose(tmp)
    from trinity.assembly import coordinator as assembly

    original = assembly.coordinator_from_config
    backbone = tiny_backbone()
    with pytest.MonkeyPatch.context() as mp:  # the stage builds its coordinator from cfg: give it the tiny backbone
        mp.setattr(assembly, "coordinator_from_config", lambda c, backbone_=None: original(c, backbone))
        out = cache_states_stage.run(cfg)
    return {"tmp": tmp, "stage": out, "cfg": _compose(tmp, "coordinator.features.normalize=standardize")}


def _train_and_other_states(setup):
    from trinity.tasks.prepare import load_items

    train, other = [], []
    for suite in TRAIN:
        uids, features, _ = read_state_cache(setup["tmp"] / "states" / f"{suite}.safetensors")
        split = {it.uid: it.split for it in load_items(setup["tmp"] / "prepared", suite)}
        for uid, f in zip(uids, features, strict=True):
            (train if split[uid] == "train" else other).append(f)
    return np.array(train, dtype=np.float64), np.array(other, dtype=np.float64)


def test_cache_states_stage_writes_the_feature_stats(setup):
    tmp = setup["tmp"]
    metrics = json.loads((tmp / "metrics" / "states.json").read_text())
    assert metrics["count"] == setup["stage"]["count"] == 11 + 8 + 4
    assert 0 < metrics["prompt_dependent_share"] < 1
    assert metrics["same_suite_pairs"] > 0 and metrics["cross_suite_pairs"] > 0
    assert np.isclose(metrics["rms_norm"] ** 2, metrics["mean_norm"] ** 2 + metrics["rms_deviation_norm"] ** 2)
    assert set(metrics["per_suite"]) == set(TRAIN + TRANSFER)
    assert json.loads((tmp / "states" / "manifest.json").read_text())["feature_stats"] == {
        k: v for k, v in metrics.items() if k != "per_suite"}
    index = json.loads((tmp / "states" / "mmlu.json").read_text())
    assert index["feature_stats"]["count"] == 11 and "cosine_same_suite" in index["feature_stats"]
    assert len(index["uids"]) == 11  # the index itself is intact


def test_standardize_gives_zero_mean_unit_variance_on_the_training_states(setup):
    coord = build_coordinator(setup["cfg"], backbone=tiny_backbone())
    train, other = _train_and_other_states(setup)
    norm = coord.feature_norm
    assert norm.count == len(train) == 13 and norm.dim == coord.hidden_size
    z = norm.apply(train)
    assert np.allclose(z.mean(axis=0), 0.0, atol=1e-6)
    floored = norm.std > train.std(axis=0) + 1e-12
    assert np.allclose(z[:, ~floored].std(axis=0), 1.0, atol=1e-6) and (~floored).sum() > coord.hidden_size // 2
    # validation / test / transfer items are not in the statistics
    assert not np.allclose(norm.mean, np.concatenate([train, other]).mean(axis=0))


def test_x0_zero_is_still_uniform_routing(setup):
    for roles, expected in ((None, [1 / 3] * 3), ("[worker,verifier]", [0.5, 0.0, 0.5])):
        cfg = setup["cfg"] if roles is None else _compose(setup["tmp"], "coordinator.features.normalize=standardize",
                                                           f"coordinator.roles={roles}")
        coord = build_coordinator(cfg, backbone=tiny_backbone())
        head = coord.head_for(coord.layout.zeros())
        assert head.norm is coord.feature_norm
        for f in _train_and_other_states(setup)[1]:
            p_agent, p_role = head.probabilities(f)
            assert np.allclose(p_agent, 1 / 3) and np.allclose(p_role, expected)


def _probe_features(setup) -> np.ndarray:
    return np.concatenate(_train_and_other_states(setup))


def test_save_and_load_keep_the_statistics_and_route_identically(setup, tmp_path):
    coord = build_coordinator(setup["cfg"], backbone=tiny_backbone())
    params = np.random.default_rng(0).normal(0, 0.05, coord.num_params)
    path = coord.save(tmp_path / "coordinator.safetensors", params, {"generation": 1})
    _, meta, tensors = load_saved(path)
    assert meta["feature_normalize"] == "standardize" and meta["feature_norm_sha256"] == coord.feature_norm.digest
    assert np.array_equal(tensors["feature_mean"], coord.feature_norm.mean)
    assert np.array_equal(tensors["feature_std"], coord.feature_norm.std)
    # loading needs no states at all: the stored statistics are used, never recomputed
    no_states = _compose(tmp_path, "coordinator.features.normalize=standardize")
    loaded, loaded_params = load_coordinator(path, config.typed(no_states), backbone=tiny_backbone())
    assert np.array_equal(loaded_params, params) and loaded.feature_norm.digest == coord.feature_norm.digest
    for f in _probe_features(setup):
        for a, b in zip(loaded.head_for(loaded_params).probabilities(f), coord.head_for(params).probabilities(f),
                        strict=True):
            assert np.array_equal(a, b)
        assert not np.allclose(coord.head_for(params).probabilities(f)[0], RoutingHead(
            coord.layout.head_weights(params), 3).probabilities(f)[0])  # the statistics do act
    text = "Task: what is 2 + 2?"

    def picks(c, p):
        r, rng = c.router_for(p), np.random.default_rng(5)
        return [asyncio.run(r.choose(text, t, rng)) for t in range(6)]
    assert picks(loaded, loaded_params) == picks(coord, params)


def test_read_params_uses_each_files_own_statistics(setup, tmp_path):
    coord = build_coordinator(setup["cfg"], backbone=tiny_backbone())
    params = np.random.default_rng(1).normal(0, 0.05, coord.num_params)
    a = coord.save(tmp_path / "a.safetensors", params)
    other = FeatureNorm(coord.feature_norm.mean + 1.0, coord.feature_norm.std * 2.0)
    shifted = params + 0.01
    b = save_params(tmp_path / "b.safetensors", shifted,
                    {**coord.metadata(), **other.metadata()}, other.tensors())
    evaluator = build_coordinator(_compose(tmp_path, "coordinator.features.normalize=standardize"),
                                  backbone=tiny_backbone())
    pa, pb = evaluator.read_params(a), evaluator.read_params(b)
    assert evaluator.head_for(pa).norm.digest == coord.feature_norm.digest
    assert evaluator.head_for(pb).norm.digest == other.digest
    with pytest.raises(FeatureNormError, match="cache_states"):  # anything else would need states, and there are none
        evaluator.head_for(pa + 1.0)


def test_mismatched_normalisation_is_refused_both_ways(setup, tmp_path):
    standardized = build_coordinator(setup["cfg"], backbone=tiny_backbone())
    params = np.zeros(standardized.num_params)
    std_path = standardized.save(tmp_path / "std" / "coordinator.safetensors", params)
    plain_cfg = _compose(setup["tmp"], "coordinator.features.normalize=none")
    with pytest.raises(CoordinatorMismatchError, match="coordinator.features.normalize"):
        load_coordinator(std_path, config.typed(plain_cfg), backbone=tiny_backbone())
    plain = build_coordinator(plain_cfg, backbone=tiny_backbone())
    plain_path = plain.save(tmp_path / "plain" / "coordinator.safetensors", params)
    _, meta, tensors = load_saved(plain_path)
    assert meta["feature_normalize"] == "none" and not tensors
    with pytest.raises(CoordinatorMismatchError, match="coordinator.features.normalize"):
        load_coordinator(plain_path, config.typed(setup["cfg"]), backbone=tiny_backbone())
    with pytest.raises(CoordinatorMismatchError, match="coordinator.features.normalize"):
        standardized.read_params(plain_path)  # the evaluation path
    # a file saved before the key existed counts as `none`
    old = {k: v for k, v in meta.items() if k not in ("feature_normalize", "format")}
    save_params(tmp_path / "old.safetensors", params, old)
    old, _ = load_coordinator(tmp_path / "old.safetensors", config.typed(plain_cfg), backbone=tiny_backbone())
    assert old.feature_norm is None
    # standardize without (well-shaped) statistics is refused
    bad = {**standardized.metadata()}
    save_params(tmp_path / "bare.safetensors", params, bad)
    with pytest.raises(CoordinatorMismatchError, match="feature statistics are missing"):
        load_coordinator(tmp_path / "bare.safetensors", config.typed(setup["cfg"]), backbone=tiny_backbone())
    save_params(tmp_path / "short.safetensors", params, bad, {"feature_mean": np.zeros(3), "feature_std": np.ones(3)})
    with pytest.raises(CoordinatorMismatchError, match="wrong shape"):
        load_coordinator(tmp_path / "short.safetensors", config.typed(setup["cfg"]), backbone=tiny_backbone())


def test_an_invalid_normalize_value_is_a_config_error(setup):
    with pytest.raises(ConfigError, match="coordinator.features.normalize"):
        config.compose(["experiment=local_live", "coordinator.features.normalize=zscore"])
    cfg = OmegaConf.create(config.as_written(setup["cfg"]))
    cfg.coordinator.features.normalize = "whiten"
    with pytest.raises(ConfigError, match="coordinator.features.normalize"):
        build_coordinator(config.typed(cfg), backbone=tiny_backbone())
    del cfg.coordinator["features"]  # an older params.yaml without the block: none
    assert build_coordinator(config.typed(cfg), backbone=tiny_backbone()).normalize == "none"


def test_standardize_without_states_says_to_run_cache_states(tmp_path, setup):
    cfg = _compose(tmp_path, "coordinator.features.normalize=standardize")
    coord = build_coordinator(cfg, backbone=tiny_backbone())  # building needs no states
    with pytest.raises(FeatureNormError, match="run the cache_states stage"):
        coord.head_for(coord.layout.zeros())


def test_states_of_another_token_position_are_recomputed_with_the_coordinator(setup):
    from trinity.tasks.prepare import load_items

    cfg = _compose(setup["tmp"], "coordinator.features.normalize=standardize", "coordinator.token_position=-1")
    coord = build_coordinator(cfg, backbone=tiny_backbone())
    items = [it for s in TRAIN for it in load_items(setup["tmp"] / "prepared", s, "train")]
    expected = FeatureNorm.fit(first_turn_features(coord, items, cfg.protocol))
    assert coord.feature_norm.digest == expected.digest
    cached = build_coordinator(setup["cfg"], backbone=tiny_backbone()).feature_norm
    assert coord.feature_norm.digest != cached.digest


# ---------------------------------------------------------------------- REINFORCE under normalisation
@pytest.mark.parametrize("roles", [ROLES, ("worker", "verifier")])
def test_log_prob_gradient_matches_finite_differences_under_normalisation(roles):
    r = np.random.default_rng(2)
    d = 5
    raw = r.normal(size=(40, d)) * 3 + 20.0
    norm = FeatureNorm.fit(raw)
    w = r.normal(size=(3 + 3, d))
    for feature in raw[:3]:
        for agent, role in [(0, "worker"), (2, roles[-1])]:
            analytic = RoutingHead(w, 3, roles, norm).log_prob_grad(feature, agent, role)
            numeric = numeric_grad(lambda x, feature=feature, agent=agent, role=role:   # runs in this iteration
                                   RoutingHead(x, 3, roles, norm).log_prob(feature, agent, role), w)
            assert np.allclose(analytic, numeric, atol=1e-6)
            assert not np.allclose(analytic, RoutingHead(w, 3, roles).log_prob_grad(feature, agent, role))


def test_reinforce_gradient_from_recorded_decisions_is_the_normalised_one(setup):
    from trinity.evolve.on_policy import EpisodeDecisions
    from trinity.evolve.strategy_registry import make_strategy

    coord = build_coordinator(setup["cfg"], backbone=tiny_backbone())
    params = np.random.default_rng(3).normal(0, 0.3, coord.num_params)
    texts = [f"Task {i}: add {i} and {2 * i}." for i in range(3)]
    records, raw = [], []
    for e, text in enumerate(texts):
        router = coord.router_for(params, record=True)
        rng = np.random.default_rng(e)
        for t in range(2):
            asyncio.run(router.choose(text + " more" * t, t, rng))
        raw.append([coord.engine.reference_feature(text + " more" * t) for t in range(2)])
        records.append(EpisodeDecisions(float(e), list(router.decisions)))
    for dec, f in zip(records[0].decisions, raw[0], strict=True):  # a decision holds what W multiplied
        assert np.allclose(dec.feature, coord.feature_norm.apply(f), atol=1e-4 * max(1.0, np.abs(dec.feature).max()))
    method = make_strategy("reinforce", coord.num_params, popsize=2)
    grad, baseline = method.gradient(params, records)

    def surrogate(x: np.ndarray) -> float:  # 1/N sum (R - b) sum_t log pi(a_t | raw f_t), with the coordinator's head
        head = coord.head_for(x)
        return sum((rec.reward - baseline) * sum(head.log_prob(f, d.agent, d.role)
                                                 for d, f in zip(rec.decisions, fs, strict=True))
                   for rec, fs in zip(records, raw, strict=True)) / len(records)

    numeric = numeric_grad(surrogate, params, h=1e-5)
    assert np.allclose(grad, numeric, atol=1e-4)


# ---------------------------------------------------------------------- rebalance
def test_rebalance_keeps_the_shared_direction_at_the_norm_of_what_varies():
    r = np.random.default_rng(3)
    shared = np.full(8, 40.0)
    f = shared + r.normal(size=(200, 8))
    norm = FeatureNorm.fit(f, keep_shared=True)
    z = norm.apply(f)
    centred = (f - norm.mean) / norm.std
    # the mean of the mapped features is the shared direction, at the rms norm of the centred part
    assert norm.shared_norm == pytest.approx(float(np.sqrt(np.mean(np.sum(centred ** 2, axis=1)))))
    assert np.linalg.norm(z.mean(axis=0)) == pytest.approx(norm.shared_norm)
    assert np.allclose(z.mean(axis=0) / np.linalg.norm(z.mean(axis=0)), norm.mean / np.linalg.norm(norm.mean))
    # a bias-free head can still prefer one row for every input (impossible after plain centring)
    w = np.zeros((5, 8))
    w[0] = norm.mean / np.linalg.norm(norm.mean)
    assert np.all((w @ z.T)[0] > 0) and not np.all((w @ centred.T)[0] > 0)
    assert norm.digest != FeatureNorm.fit(f).digest


def test_rebalance_is_saved_loaded_and_refused_when_mismatched(setup, tmp_path):
    cfg = _compose(setup["tmp"], "coordinator.features.normalize=rebalance")
    coord = build_coordinator(cfg, backbone=tiny_backbone())
    assert coord.feature_norm.shared_norm > 0
    params = np.random.default_rng(2).normal(0, 0.05, coord.num_params)
    path = coord.save(tmp_path / "coordinator.safetensors", params)
    rebalance = config.typed(_compose(tmp_path, "coordinator.features.normalize=rebalance"))
    loaded, loaded_params = load_coordinator(path, rebalance, backbone=tiny_backbone())
    assert loaded.feature_norm.digest == coord.feature_norm.digest
    for f in _probe_features(setup):
        for a, b in zip(loaded.head_for(loaded_params).probabilities(f), coord.head_for(params).probabilities(f),
                        strict=True):
            assert np.array_equal(a, b)
    with pytest.raises(CoordinatorMismatchError, match="coordinator.features.normalize"):
        # saved rebalance, configured standardize
        load_coordinator(path, config.typed(setup["cfg"]), backbone=tiny_backbone())
    zero = coord.head_for(np.zeros(coord.num_params))
    for f in _probe_features(setup):
        agents, roles = zero.probabilities(f)
        assert np.allclose(agents, 1 / len(agents)) and np.allclose(roles, 1 / 3)   # x0 = 0 is still uniform


# ---------------------------------------------------------------------- capacity control: coordinator.features.rank
def test_rank_keeps_the_top_principal_directions_and_nothing_else():
    r = np.random.default_rng(4)
    # 300 features in 10 dimensions whose prompt-dependent part lies mostly in two known directions
    directions = np.linalg.qr(r.normal(size=(10, 2)))[0].T
    f = 30.0 + r.normal(size=(300, 2)) * [5.0, 3.0] @ directions + 0.01 * r.normal(size=(300, 10))
    full = FeatureNorm.fit(f, keep_shared=True)
    two = FeatureNorm.fit(f, keep_shared=True, rank=2)
    assert full.rank is None and two.rank == 2 and two.basis.shape == (2, 10)
    assert np.allclose(two.basis @ two.basis.T, np.eye(2))
    assert two.shared_norm == full.shared_norm   # a rank removes directions and rescales nothing
    z_full, z_two = full.apply(f), two.apply(f)
    # what varies with the prompt lies in the basis's span: projecting again changes nothing
    varying = z_two - z_two.mean(axis=0)
    assert np.allclose(varying @ two.basis.T @ two.basis, varying, atol=1e-9)
    # the top two directions carry almost all of the standardised variance here, so rank 2 loses little
    assert np.linalg.norm(z_full - z_two) / np.linalg.norm(z_full - z_full.mean(axis=0)) < 0.05
    one = FeatureNorm.fit(f, keep_shared=True, rank=1)
    assert np.linalg.norm(z_full - one.apply(f)) > 0.3 * np.linalg.norm(z_full - z_full.mean(axis=0))
    assert len({full.digest, two.digest, one.digest}) == 3


def test_rank_zero_is_a_prompt_independent_policy():
    r = np.random.default_rng(5)
    f = 40.0 + r.normal(size=(50, 6))
    norm = FeatureNorm.fit(f, keep_shared=True, rank=0)
    z = norm.apply(f)
    assert norm.rank == 0 and np.allclose(z, z[0])   # every feature maps to the shared direction alone
    assert np.linalg.norm(z[0]) == pytest.approx(norm.shared_norm) and norm.shared_norm > 0
    # any head over it routes every transcript alike, and still prefers what its weights say
    head = RoutingHead(r.normal(size=(3 + len(ROLES), 6)), 3, ROLES, norm)
    first = head.probabilities(f[0])
    assert not np.allclose(first[0], 1 / 3)
    for row in f[1:]:
        assert all(np.allclose(a, b) for a, b in zip(head.probabilities(row), first, strict=True))


def test_a_rank_above_what_the_features_span_is_refused():
    f = np.random.default_rng(6).normal(size=(5, 20))
    with pytest.raises(FeatureNormError, match="span only 4 directions"):
        FeatureNorm.fit(f, rank=5)   # 5 centred features span at most 4 directions
    with pytest.raises(FeatureNormError, match=">= 0"):
        FeatureNorm.fit(f, rank=-1)


def test_rank_is_a_config_error_without_standardisation(setup):
    with pytest.raises(ConfigError, match="coordinator.features.rank"):
        _compose(setup["tmp"], "coordinator.features.normalize=none", "coordinator.features.rank=2")   # no directions
    with pytest.raises(ConfigError, match="rebalance"):
        _compose(setup["tmp"], "coordinator.features.normalize=standardize", "coordinator.features.rank=0")
    with pytest.raises(ConfigError, match="coordinator.features.rank"):
        _compose(setup["tmp"], "coordinator.features.normalize=rebalance", "coordinator.features.rank=-1")


def test_a_ranked_coordinator_is_saved_loaded_and_its_basis_checked(setup, tmp_path):
    cfg = _compose(setup["tmp"], "coordinator.features.normalize=rebalance", "coordinator.features.rank=3")
    coord = build_coordinator(cfg, backbone=tiny_backbone())
    assert coord.feature_norm.rank == 3
    params = np.random.default_rng(7).normal(0, 0.05, coord.num_params)
    path = coord.save(tmp_path / "coordinator.safetensors", params)
    _, meta, tensors = load_saved(path)
    assert meta["feature_norm_rank"] == 3 and tensors["feature_basis"].shape == (3, coord.hidden_size)
    # loading under another configured rank routes with the saved basis, as trained
    rebalance = config.typed(_compose(tmp_path, "coordinator.features.normalize=rebalance"))
    loaded, loaded_params = load_coordinator(path, rebalance, backbone=tiny_backbone())
    assert loaded.feature_norm.rank == 3 and loaded.feature_norm.digest == coord.feature_norm.digest
    for f in _probe_features(setup):
        for a, b in zip(loaded.head_for(loaded_params).probabilities(f), coord.head_for(params).probabilities(f),
                        strict=True):
            assert np.array_equal(a, b)
    # a file whose basis does not match its metadata is refused, never routed
    save_params(tmp_path / "bad.safetensors", params, {**meta, "feature_norm_rank": 2},
                {**coord.feature_norm.tensors()})
    with pytest.raises(CoordinatorMismatchError, match="feature_norm_rank"):
        rebalance = config.typed(_compose(tmp_path, "coordinator.features.normalize=rebalance"))
        load_coordinator(tmp_path / "bad.safetensors", rebalance, backbone=tiny_backbone())
