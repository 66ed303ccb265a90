"""Coordinator feature cost on the configured backbone (default: SmolLM2-135M-Instruct on CPU).

Measures, on a 5-turn transcript of realistic length:
- per-turn feature time with prefix KV reuse vs full recompute (goal: turn 5 with reuse <= 1/3 of full);
- throughput of 8 prompts in one batched call vs one by one (goal: >= 3x), for fresh first-turn prompts
  and for next turns of 8 concurrent episodes (prefix reuse on);
- the same next-turn comparison when each turn adds a short thought (one sentence, ~40 tokens: a
  Verifier verdict or a terse idea), where per-call overhead rather than arithmetic dominates;
- the same for the SVF per-candidate path (SVF on the 7 projections of the second-to-last layer):
  one candidate from cached activations vs a full SVF forward; 8 candidates batched vs one by one;
- what the `cache_states` stage does: `--states N` distinct first-turn prompts through
  `Coordinator.precompute` in batches of `feature_cache.max_batch`, as prompts per second;
- padding: `--states N` first-turn prompts of mixed lengths (about 150 to 560 tokens, like the prepared
  suites) batched with `feature_cache.max_padding` unbounded vs the configured bound, in one run;
- the arithmetic ceiling of batching: the backbone's linear-layer GFLOP/s when prompts run one by one,
  against a large square matmul's GFLOP/s on the same device and dtype. Batching can only fill idle
  arithmetic, so peak / one-by-one bounds the speedup any batching can give to long prompts;
- agreement: max |batched or reused feature - plain forward| / max |plain forward| (tests hold it <= 1e-4
  in float32).
Prints ONE JSON line. Times are medians of `--repeats` runs, in seconds; each ratio is the median of
per-repeat ratios of its two sides timed alternately, so load drift on a shared machine hits both.

    python benchmarks/coordinator_features.py [--threads 2] [--repeats 3] [--device cpu] [--dtype float32]
        [--states 32] [--overrides key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import torch

TASK = (
    "Answer the following multiple-choice question about college physics. A uniform solid cylinder of mass M "
    "and radius R rolls without slipping down an incline of angle theta, starting from rest at height h. "
    "Ignore air resistance and rolling friction. Which expression gives the speed of its centre of mass at the "
    "bottom of the incline?\n(A) sqrt(2gh)\n(B) sqrt(4gh/3)\n(C) sqrt(gh)\n(D) sqrt(10gh/7)\n"
    "Think about energy conservation, the moment of inertia of a solid cylinder about its axis, and the rolling "
    "constraint v = omega R. End with 'The answer is (X)'."
)
INSTRUCTIONS = (
    "Several agents collaborate on this task over multiple turns. Each contribution is added below as a "
    "numbered reference thought. Build on the useful ones and fix their mistakes."
)
THOUGHT = (
    "Energy conservation gives M g h = (1/2) M v^2 + (1/2) I omega^2. For a solid cylinder I = (1/2) M R^2 and "
    "rolling without slipping means omega = v / R, so the rotational term is (1/4) M v^2. Adding the two kinetic "
    "terms gives (3/4) M v^2 = M g h, hence v^2 = 4 g h / 3 and v = sqrt(4gh/3). Checking the options, (B) "
    "matches; (D) would be a solid sphere with I = (2/5) M R^2, and (A) ignores rotation entirely. "
)


SHORT_THOUGHT = "The rotational term adds a quarter of M v^2, so the answer is (B). "


def episode(turns: int = 5, task: str = TASK, thought: str = THOUGHT * 2) -> list[str]:
    text = f"{task}\n\n{INSTRUCTIONS}"
    out = [text]
    for t in range(1, turns):
        text += f"\n\n{t}. " + thought + f"(checked again in round {t})"
        out.append(text)
    return out


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got) - np.asarray(want))) / max(1e-12, float(np.max(np.abs(want)))))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(a, b, repeats: int, setup=None) -> tuple[float, float, float]:
    """Time `a` and `b` alternately (`setup` before each), so load drift on a shared machine hits both:
    the median time of each and the median of the per-repeat ratios a / b."""
    ta, tb = [], []
    for _ in range(repeats):
        for fn, out in ((a, ta), (b, tb)):
            if setup:
                setup()
            out.append(timed(fn))
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in zip(ta, tb, strict=True))


def median_time(fn, repeats: int, setup=None) -> float:
    times = []
    for _ in range(repeats):
        if setup:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    parser.add_argument("--states", type=int, default=32, help="first-turn prompts for the cache_states figure")
    parser.add_argument("--overrides", nargs="*", default=[])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.coordinator.features.engine import FeatureRequest

    layer = "model.layers.{}"
    cfg = config.load(None, [f"paths.cache={tempfile.mkdtemp()}", f"coordinator.backbone.device={args.device}",
                             f"coordinator.backbone.dtype={args.dtype}", *args.overrides])
    # SVF on the 7 projections of the second-to-last layer, as the paper (its embeddings/LM head left out).
    from trinity.coordinator.backbone import load_backbone

    backbone = load_backbone(cfg.coordinator.backbone, cfg.paths.model_cache)
    adapted = layer.format(backbone.num_layers - 2)
    cfg.coordinator.svf.enabled = True
    cfg.coordinator.svf.matrices = [f"{adapted}.self_attn.*_proj", f"{adapted}.mlp.*_proj"]
    cfg.coordinator.feature_cache.disk = False
    coord = coordinator_from_config(cfg, backbone=backbone)
    eng, R = coord.engine, args.repeats
    store = eng.prefix_store

    def fresh():
        coord.cache.clear_memory()
        store.clear()

    turns = episode()
    tokens = [len(eng.tokens(t)) for t in turns]
    coord.precompute(["warm-up"])

    # 1. per-turn cost: prefix reuse vs full recompute, alternating per repeat
    def run_episode():
        times = []
        for t in turns:
            coord.cache.clear_memory()  # no content hits: only the prefix KV is reused
            times.append(timed(lambda t=t: coord.precompute([t])))
        return times

    reuse_runs, full_runs = [], []
    for _ in range(R):
        fresh()
        reuse_runs.append(run_episode())
        full_runs.append([timed(lambda t=t: eng.reference_feature(t)) for t in turns])
    reuse = [statistics.median(col) for col in zip(*reuse_runs, strict=True)]
    full = [statistics.median(col) for col in zip(*full_runs, strict=True)]
    turn5_ratio = statistics.median(r[-1] / f[-1] for r, f in zip(reuse_runs, full_runs, strict=True))

    # 2. batching: 8 distinct first-turn prompts, and the next turn of 8 concurrent episodes
    tasks = [TASK.replace("college physics", f"college physics (variant {i})") for i in range(8)]
    first = [episode(1, task)[0] for task in tasks]
    eng.prefix_store = None  # distinct prompts share the system prompt: keep reuse out of this comparison
    one_first, batch_first, first_speedup = paired(
        lambda: [coord.precompute([p]) for p in first], lambda: coord.precompute(first), R, coord.cache.clear_memory
    )
    eng.prefix_store = store
    episodes = [episode(3, task) for task in tasks]

    def prime():
        fresh()
        coord.precompute([e[1] for e in episodes])
        coord.cache.clear_memory()

    one_next, batch_next, next_speedup = paired(
        lambda: [coord.precompute([e[2]]) for e in episodes], lambda: coord.precompute([e[2] for e in episodes]),
        R, prime,
    )
    prime()
    agree = rel_diff(coord.precompute([e[2] for e in episodes]),
                     np.stack([eng.reference_feature(e[2]) for e in episodes]))
    agree = max(agree, rel_diff(coord.precompute(first), np.stack([eng.reference_feature(p) for p in first])))

    short = [episode(3, task, SHORT_THOUGHT) for task in tasks]

    def prime_short():
        fresh()
        coord.precompute([e[1] for e in short])
        coord.cache.clear_memory()

    new_short = len(eng.tokens(short[0][2])) - len(eng.tokens(short[0][1]))
    one_short, batch_short, short_speedup = paired(
        lambda: [coord.precompute([e[2]]) for e in short], lambda: coord.precompute([e[2] for e in short]),
        R, prime_short,
    )

    # cache_states: distinct first-turn prompts, batched as the stage batches them
    states = [episode(1, TASK.replace("college physics", f"college physics, set {i}"))[0] for i in range(args.states)]
    eng.prefix_store = None
    states_s = median_time(lambda: coord.precompute(states), 1, coord.cache.clear_memory)
    eng.prefix_store = store

    # padding: mixed-length first turns, padded batches unbounded vs bounded by max_padding
    spread = np.random.default_rng(1).integers(0, 9, args.states)
    mixed = [episode(1, TASK.replace("college physics", f"college physics, item {i}")
                     + " Show each step." * int(6 * k))[0]
             for i, k in enumerate(spread)]
    mixed_tokens = [len(eng.tokens(p)) for p in mixed]
    bound = eng.max_padding
    eng.prefix_store = None

    def unbounded():
        eng.max_padding = None
        coord.precompute(mixed)
        eng.max_padding = bound

    mixed_unbounded_s, mixed_bounded_s, padding_speedup = paired(
        unbounded, lambda: coord.precompute(mixed), 1, coord.cache.clear_memory
    )
    eng.prefix_store = store

    # arithmetic ceiling: linear-layer FLOPs of the 8 first turns run one by one, against a big matmul
    linear_params = sum(m.weight.numel() for m in coord.backbone.decoder.layers.modules()
                        if isinstance(m, torch.nn.Linear))
    first_tokens = sum(len(eng.tokens(p)) for p in first)
    one_by_one_gflops = 2 * linear_params * first_tokens / one_first / 1e9
    a = torch.randn(2048, 2048, dtype=coord.backbone.dtype, device=coord.backbone.device)

    def matmuls():
        for _ in range(5):
            a @ a
        if coord.backbone.device.type == "cuda":
            torch.cuda.synchronize()

    matmuls()
    peak_gflops = 5 * 2 * 2048**3 / median_time(matmuls, R) / 1e9

    # 3. SVF per candidate on the turn-5 transcript
    rng = np.random.default_rng(0)
    candidates = [rng.normal(0, 0.03, coord.layout.svf_size) for _ in range(8)]
    last = turns[-1]
    coord.precompute([last])  # activations entering the adapted layer are now stored with the prefix
    svf_one, svf_full, svf_ratio = paired(
        lambda: coord.precompute([last], candidates[0]), lambda: eng.reference_feature(last, candidates[0]), R,
        coord.cache.clear_memory,
    )
    svf_one_by_one, svf_batch, svf_speedup = paired(
        lambda: [coord.precompute([last], c) for c in candidates],
        lambda: eng.features([FeatureRequest(last, c) for c in candidates]), R, coord.cache.clear_memory,
    )
    coord.cache.clear_memory()
    svf_agree = rel_diff(eng.features([FeatureRequest(last, c) for c in candidates[:2]]),
                         np.stack([eng.reference_feature(last, c) for c in candidates[:2]]))

    def r(x):
        return round(x, 4)

    result = {
        "benchmark": "coordinator_features",
        "backbone": coord.backbone.name,
        "device": str(coord.backbone.device),
        "device_name": torch.cuda.get_device_name(0) if coord.backbone.device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "threads": args.threads,
        "repeats": R,
        "prompt_tokens_per_turn": tokens,
        "full_recompute_s": [r(x) for x in full],
        "prefix_reuse_s": [r(x) for x in reuse],
        "turn5_reuse_over_full": r(turn5_ratio),
        "goal_turn5_reuse_le_third": turn5_ratio <= 1 / 3,
        "first_turn_8_one_by_one_s": r(one_first),
        "first_turn_8_batched_s": r(batch_first),
        "first_turn_batch_speedup": r(first_speedup),
        "next_turn_8_one_by_one_s": r(one_next),
        "next_turn_8_batched_s": r(batch_next),
        "next_turn_batch_speedup": r(next_speedup),
        "goal_batch_speedup_ge_3": max(first_speedup, next_speedup) >= 3,
        "short_thought_new_tokens": new_short,
        "next_turn_short_8_one_by_one_s": r(one_short),
        "next_turn_short_8_batched_s": r(batch_short),
        "next_turn_short_batch_speedup": r(short_speedup),
        "states_prompts": args.states,
        "states_max_batch": eng.max_batch,
        "states_prompts_per_s": r(args.states / states_s),
        "mixed_prompts_tokens_min_max": [min(mixed_tokens), max(mixed_tokens)],
        "mixed_unbounded_padding_prompts_per_s": r(args.states / mixed_unbounded_s),
        "mixed_max_padding": bound,
        "mixed_bounded_padding_prompts_per_s": r(args.states / mixed_bounded_s),
        "padding_bound_speedup": r(padding_speedup),
        "one_by_one_linear_gflops": round(one_by_one_gflops, 1),
        "matmul_2048_gflops": round(peak_gflops, 1),
        "batch_speedup_ceiling_long_prompts": r(peak_gflops / one_by_one_gflops),
        "max_rel_diff_batched_vs_plain": float(f"{agree:.3g}"),
        "svf_matrices": [n for n, _ in coord.layout.svf_matrices],
        "svf_params": coord.layout.svf_size,
        "svf_turn5_full_s": r(svf_full),
        "svf_turn5_from_cached_activations_s": r(svf_one),
        "svf_cached_over_full": r(svf_ratio),
        "svf_8_candidates_one_by_one_s": r(svf_one_by_one),
        "svf_8_candidates_batched_s": r(svf_batch),
        "svf_batch_speedup": r(svf_speedup),
        "max_rel_diff_svf_batched_vs_plain": float(f"{svf_agree:.3g}"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
