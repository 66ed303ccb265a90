"""States shipped with a recording (`trinity record --states`): the cache_states stage reads them instead of
running the backbone, and its files are then the same bytes as when it computes every item itself; a damaged
shipped file stops the stage with a message naming it; another coordinator identity or another set of
transcripts is computed, never mixed in. The backbone is the tiny random one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from recording_support import make_recording

from trinity import config
from trinity.files import sha256_file

pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast


@pytest.fixture(scope="module")
def recording(tmp_path_factory, tiny_backbone_overrides):
    tmp = tmp_path_factory.mktemp("shipped")
    cfg, root, _server = make_recording(tmp, roles=("worker", "verifier"), overrides=tuple(tiny_backbone_overrides))
    return cfg, root


def run_cfg(recording, tmp_path: Path, **changes):
    """A config replaying a private copy of the recording, with its own outputs under tmp_path."""
    base, root = recording
    copy = tmp_path / "recording"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".journal*"))
    return config.with_values(base, {
        "pool.replay": {"recording": str(copy), "on_miss": "error"}, "coordinator.roles": ["worker", "verifier"],
        "ablations.enabled": True, "ablations.variants": ["last_token"],   # two token positions per state
        **{f"paths.{key}": str(tmp_path / key) for key in ("states", "metrics", "cache")}, **changes})


def state_bytes(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.safetensors"))}


def test_shipped_states_give_the_bytes_the_stage_computes_and_no_forward_pass(recording, tmp_path):
    from trinity.pipeline import cache_states_stage, record_states

    computed_cfg = run_cfg(recording, tmp_path / "computed")
    computed = {}
    cache_states_stage.run(computed_cfg, changes=computed)
    assert computed["shipped"] == 0 and computed["item_groups"] == 7   # every recorded item computed

    cfg = run_cfg(recording, tmp_path / "shipped")
    out = record_states.run(cfg, progress=lambda _m: None)
    assert out["items"] == 7 and out["written"] == 7 and out["missing_items"] == 0
    folder = Path(out["folder"])
    assert folder.parent == Path(cfg.pool.replay.recording) / "states" and (folder / "index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) == 7          # one file per item, named after its part
    # append-only: a second run finds every item and writes nothing
    again = record_states.run(cfg, progress=lambda _m: None)
    assert again["written"] == 0 and again["present"] == 7

    changes = {}
    cache_states_stage.run(cfg, changes=changes)
    assert changes["shipped"] == 7 and changes["item_groups"] == 7
    shipped_files = state_bytes(Path(cfg.paths.states))
    assert "recorded-transcripts@-1.safetensors" in shipped_files
    assert shipped_files == state_bytes(Path(computed_cfg.paths.states))


def test_a_damaged_shipped_state_stops_the_stage_naming_the_file(recording, tmp_path):
    from trinity.pipeline import cache_states_stage, record_states
    from trinity.pipeline.shipped_states import ShippedStatesError

    cfg = run_cfg(recording, tmp_path)
    folder = Path(record_states.run(cfg, progress=lambda _m: None, limit_items=2)["folder"])
    victim = sorted(folder.glob("*.safetensors"))[0]
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ShippedStatesError, match=victim.name):
        cache_states_stage.run(cfg)
    # the index damaged: a clear error too, not a silent recomputation
    (folder / "index.json").write_text("{not json")
    with pytest.raises(ShippedStatesError, match="damaged"):
        cache_states_stage.run(cfg)


def test_another_coordinator_setup_or_other_transcripts_are_computed(recording, tmp_path):
    from trinity.assembly.coordinator import coordinator_from_config
    from trinity.pipeline import cache_states_stage, record_states
    from trinity.pipeline.shipped_states import ShippedStates

    cfg = run_cfg(recording, tmp_path / "a")
    out = record_states.run(cfg, progress=lambda _m: None)
    # another batching setting is another identity: its own folder, nothing shipped for it
    other = run_cfg(recording, tmp_path / "b", **{"coordinator.feature_cache.max_batch": 3})
    shutil.rmtree(Path(other.pool.replay.recording) / "states", ignore_errors=True)
    shutil.copytree(Path(out["folder"]).parent, Path(other.pool.replay.recording) / "states")
    changes = {}
    cache_states_stage.run(other, changes=changes)
    assert changes["shipped"] == 0 and changes["item_groups"] == 7
    # the same identity but another set of transcripts for an item (another protocol, a grown tree): no match
    coord = coordinator_from_config(cfg)
    shipped = ShippedStates(cfg.pool.replay.recording, coord)
    items = cache_states_stage.by_suite_items(cfg, ["gsm8k"])
    texts = cache_states_stage.recorded_item_texts(cfg, items)
    uid = items[0].uid
    assert shipped.get(uid, texts[uid], [-2, -1]) is not None
    assert shipped.get(uid, texts[uid][:1], [-2, -1]) is None
    assert shipped.get(uid, texts[uid] + ["another transcript"], [-2, -1]) is None
    assert shipped.get(uid, texts[uid], [-2, -3]) is None           # a position it does not hold
