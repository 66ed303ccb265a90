"""The cache_states stage: first-turn coordinator features of every prepared question.

The first turn's transcript is the shared message before any reference thought (task prompt +
collaboration instructions), built by the protocol's own SharedMessage so it is exactly what the
router reads at turn 0. Written per suite to `data/states/<suite>.safetensors` (on GPU when present).
On a recording (pool=recorded) it also computes every later-turn transcript of the recording's trees
(`recorded-transcripts.safetensors`), each item's together with its first turn, so a later turn reuses the
prefix of the turn it extends; an item whose states are shipped with the recording (`trinity record --states`,
trinity.pipeline.shipped_states) is read from there instead, the same bytes without a forward pass. Every token position
the run reads (the configured one, and another that an enabled ablation reads, e.g. the last-token ablation's -1) comes
from one forward pass per prompt; the other positions' files are named `<name>@<position>.safetensors`.

It also measures how much of that feature depends on the prompt at all (feature_stats.py: norm of the
mean feature, rms deviation from it, their ratio, same-suite and cross-suite cosines), over all cached
states in `manifest.json` and `metrics/states.json`, and per suite in each suite's index JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trinity.config_schema import TrinityConfig
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import first_turn_transcript
from trinity.pipeline import items as item_sel
from trinity.progress import Listener, Progress
from trinity.seeding import derive_seed

if TYPE_CHECKING:
    from trinity.coordinator.coordinator import Coordinator

log = logging.getLogger("trinity.cache_states")


def run(cfg: TrinityConfig, *, on_work: Listener | None = None, reuse_from: Sequence[str | Path] = (),
        changes: dict | None = None) -> dict:
    """`on_work(label, done, total)`: the states computed so far (trinity.progress).

    `reuse_from`: earlier states folders (a retraining run's earlier runs): a suite whose prompts, backbone,
    dtype and device class are the same as there is copied, not computed. `changes`, when given, is
    filled with {"reused": {suite: folder}, "computed": [suite, ...], "shipped": n, "item_groups": n}: on a
    recording, how many items' states were read from the states shipped with it (trinity.pipeline.shipped_states)
    of how many computed per item."""
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pipeline.state_files import reuse_state_cache, rows, save_state_cache

    protocol = ProtocolConfig.from_config(cfg.protocol)
    coord = coordinator_from_config(cfg)
    views = position_views(cfg, coord)
    out_dir = Path(cfg.paths.states)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*@*.*"):     # another position's files of an earlier run: written again below
        stale.unlink()
    suites = list(dict.fromkeys(list(cfg.tasks.train) + list(cfg.tasks.transfer)))
    # the items the run uses: every prepared item on a live pool, the recording's under pool=recorded (the
    # feature statistics are fitted on the same items' training split)
    items = {suite: by_suite_items(cfg, [suite]) for suite in suites}
    firsts = {suite: [(it.uid, first_turn_transcript(protocol, it.prompt)) for it in items[suite]] for suite in suites}
    # pool=recorded: every transcript of each item's recorded tree, so that evolution on the recording (SVF
    # off) runs no backbone forward pass at all; None on a live pool
    per_item = recorded_item_texts(cfg, [it for suite in suites for it in items[suite]])
    report = changes if changes is not None else {}
    report.update(reused={}, computed=[], shipped=0, item_groups=0)
    counts = {}
    for suite in suites:
        # an earlier run's file of the same inputs is copied (retraining); only with no other position to write
        earlier = (reuse_state_cache(coord, firsts[suite], out_dir / f"{suite}.safetensors", reuse_from)
                   if reuse_from and len(views) == 1 else None)
        if earlier is not None:
            report["reused"][suite] = str(earlier)
            counts[suite] = len(firsts[suite])
            log.info("cache_states: %s: %d first-turn features reused from %s", suite, counts[suite], earlier)
    # what is computed together: on a recording each item's transcripts (a later turn reuses the prefix of the
    # turn it extends; an item's bytes never depend on the other items, so states shipped with the recording
    # are the same bytes); on a live pool each suite's first turns not reused
    if per_item is not None:
        groups = [(it.uid, per_item[it.uid]) for suite in suites for it in items[suite]]
        later_texts = list(dict.fromkeys(t for _, texts in groups for t in texts[1:]))
    else:
        groups = [(None, [t for _, t in firsts[suite]]) for suite in suites if suite not in report["reused"]]
        later_texts = []
    features = _features(cfg, coord, list(views), groups, report, on_work)
    report["item_groups"] = len(groups) if per_item is not None else 0
    for suite in suites:
        if suite in report["reused"]:
            continue
        for position, view in views.items():
            save_state_cache(view, firsts[suite], rows(features[position], firsts[suite], coord.hidden_size),
                             state_file(out_dir, suite, position, coord))
        report["computed"].append(suite)
        counts[suite] = len(firsts[suite])
        log.info("cache_states: %s: %d first-turn features", suite, counts[suite])
    first_set = {t for suite in suites for _, t in firsts[suite]}
    later_pairs = [(_text_key(t), t) for t in later_texts if t not in first_set]
    if later_pairs:
        for position, view in views.items():
            save_state_cache(view, later_pairs, rows(features[position], later_pairs, coord.hidden_size),
                             state_file(out_dir, RECORDED_STATES, position, coord))
        counts[RECORDED_STATES] = len(later_pairs)
        log.info("cache_states: %d later-turn transcripts of the recording", len(later_pairs))
    if len(views) > 1:
        log.info("cache_states: also at token position(s) %s, which ablations read (files <name>@<position>)",
                 ", ".join(str(p) for p in views if p != coord.token_position))
    manifest = _write_manifest(cfg, coord, out_dir, suites, counts, [p for p in views if p != coord.token_position])
    return {"path": str(out_dir), "count": sum(counts.values()), **manifest}


def _features(cfg: TrinityConfig, coord: Coordinator, positions: list[int], groups: list[tuple[str | None, list[str]]],
              report: dict, on_work: Listener | None) -> dict[int, dict[str, np.ndarray]]:
    """{position: {transcript: feature}} of every group's transcripts: read from the states shipped with the
    recording where they hold the group (`report["shipped"]` counts those), else computed together."""
    from trinity.pipeline.state_files import features_at_positions

    shipped = shipped_states(cfg, coord)
    features: dict[int, dict[str, np.ndarray]] = {p: {} for p in positions}
    with Progress("cache_states: states", sum(len(texts) for _, texts in groups), listeners=[on_work],
                  unit="transcripts") as bar:
        for uid, texts in groups:
            found = shipped.get(uid, texts, positions) if shipped is not None and uid is not None else None
            if found is None:
                found = features_at_positions(coord, texts, positions, progress=bar.advance)
            else:
                report["shipped"] += 1
                bar.advance(len(texts))
            for position, by_text in found.items():
                for text, vec in by_text.items():
                    features[position].setdefault(text, vec)   # a transcript of two items: the first's
    if shipped is not None and groups:
        log.info("cache_states: %d of %d recorded items read from the states shipped with the recording (%s), "
                 "%d computed", report["shipped"], len(groups), shipped.folder, len(groups) - report["shipped"])
    return features


def _write_manifest(cfg: TrinityConfig, coord: Coordinator, out_dir: Path, suites: list[str], counts: dict[str, int],
                    other_positions: list[int]) -> dict:
    """The feature statistics (metrics/states.json) and the states folder's manifest.json; returns the manifest."""
    stats = write_feature_stats(out_dir, suites, Path(cfg.paths.metrics) / "states.json",
                                seed=derive_seed(int(cfg.seed), "feature_stats"))
    log.info("cache_states: prompt-dependent share of the feature %s (mean norm %s, rms deviation %s), "
             "cosine same suite %s, across suites %s", *(_fmt(stats.get(k)) for k in (
                 "prompt_dependent_share", "mean_norm", "rms_deviation_norm", "cosine_same_suite",
                 "cosine_cross_suite")))
    manifest = {"backbone": cfg.coordinator.backbone.id, "token_position": cfg.coordinator.token_position,
                "hidden_size": coord.hidden_size, "counts": counts, "feature_stats": stats}
    if other_positions:
        manifest["other_token_positions"] = other_positions
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def shipped_states(cfg: TrinityConfig, coord: Coordinator):
    """The states shipped with the replayed recording for this coordinator (None on a live pool)."""
    from trinity.pipeline.recorded import replay_path
    from trinity.pipeline.shipped_states import ShippedStates

    path = replay_path(cfg)
    return None if path is None else ShippedStates(path, coord)


def token_positions(cfg: TrinityConfig) -> list[int]:
    """The configured token position, then every other one that an enabled ablation of the same backbone
    reads (the last-token ablation): cache_states computes them all in one pass, so no variant recomputes."""
    positions = [cfg.coordinator.token_position]
    ablations = cfg.ablations
    if ablations.enabled:
        definitions = ablations.definitions
        for name in ablations.variants or []:
            overrides = definitions.get(name) or {}
            position = overrides.get("coordinator.token_position")
            if position is not None and not any(str(k).startswith("coordinator.backbone") for k in overrides):
                positions.append(int(position))
    return list(dict.fromkeys(positions))


def position_views(cfg: TrinityConfig, coord: Coordinator) -> dict[int, Any]:
    """{token position: a coordinator that reads it} sharing `coord`'s backbone: its content-cache keys and
    state identity name the files of that position."""
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.config import apply_overrides

    views = {coord.token_position: coord}
    for position in token_positions(cfg)[1:]:
        other = apply_overrides(cfg, {"coordinator.token_position": position}, where="ablations.definitions")
        views[position] = coordinator_from_config(other, backbone=coord.backbone)
    return views


def state_file(out_dir: Path, name: str, position: int, coord: Coordinator) -> Path:
    """The file of `name`'s states at `position` (trinity.pipeline.state_files.state_path names it)."""
    from trinity.pipeline.state_files import state_path

    return state_path(out_dir, name, None if position == coord.token_position else position)


RECORDED_STATES = "recorded-transcripts"


def by_suite_items(cfg: TrinityConfig, suites: Sequence[str]) -> list:
    out = []
    for suite in suites:
        for split in ("train", "validation", "test"):
            out += item_sel.load_split(cfg, [suite], split)
    return out


def recorded_item_texts(cfg: TrinityConfig, items: Sequence) -> dict[str, list[str]] | None:
    """{uid: [the first turn's transcript, then every later transcript of the item's recorded tree]} under
    pool=recorded (compiled with every role the recording has); None on a live pool."""
    from trinity.pipeline.recorded import RecordedWorld, replay_path
    from trinity.record.replay import RecordedReplies

    path = replay_path(cfg)
    if path is None:
        return None
    if not items:
        return {}
    replies = RecordedReplies.open(path)
    world = RecordedWorld(cfg, replies, tuple(replies.recording.manifest["tree"]["roles"]))
    protocol = ProtocolConfig.from_config(cfg.protocol)
    out = {}
    for item, compiled in zip(items, world.compiled(list(items)), strict=True):
        first = first_turn_transcript(protocol, item.prompt)
        out[item.uid] = list(dict.fromkeys([first, *(world.transcripts[s.transcript] for s in compiled.states)]))
    return out


def recorded_transcripts(cfg: TrinityConfig, items: list) -> list[tuple[str, str]]:
    """(key, transcript) of every transcript beyond the first turn in the recording's trees (pool=recorded),
    compiled with every role the recording has; [] on a live pool."""
    per_item = recorded_item_texts(cfg, items) or {}
    protocol = ProtocolConfig.from_config(cfg.protocol)
    first = {first_turn_transcript(protocol, it.prompt) for it in items}
    later = dict.fromkeys(t for texts in per_item.values() for t in texts if t not in first)
    return [(_text_key(t), t) for t in later]


def _text_key(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def write_feature_stats(out_dir: Path, suites: list[str], metrics_path: Path, *, seed: int) -> dict:
    """feature_stats over every suite's cached states (returned, and written to `metrics_path` with a
    per-suite summary); each suite's own numbers go into its index JSON under `feature_stats`."""
    from trinity.coordinator.feature_stats import feature_stats
    from trinity.pipeline.state_files import read_state_cache

    blocks, names, per_suite = [], [], {}
    for suite in suites:
        path = out_dir / f"{suite}.safetensors"
        _, features, index = read_state_cache(path)
        own = feature_stats(features, [suite] * len(features), seed=seed)
        own.pop("cosine_cross_suite", None)
        own.pop("cross_suite_pairs", None)
        index["feature_stats"] = own
        path.with_suffix(".json").write_text(json.dumps(index, indent=1) + "\n")
        per_suite[suite] = {k: own.get(k)
                            for k in ("count", "mean_norm", "rms_deviation_norm", "prompt_dependent_share",
                                                     "cosine_same_suite")}
        blocks.append(np.asarray(features, dtype=np.float64))
        names += [suite] * len(features)
    features = np.concatenate(blocks) if blocks else np.zeros((0, 0))
    stats = feature_stats(features, names, seed=seed)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps({**stats, "per_suite": per_suite}, indent=2) + "\n")
    return stats


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"
