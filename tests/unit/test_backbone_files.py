"""The backbone's architecture without loading it: the table covers every backbone conf/coordinator/ offers,
agrees with a converted folder's config.json, and a config.json on disk wins over the table."""

from __future__ import annotations

import json

import yaml

from trinity.config import conf_dir
from trinity.config_schema.choices import BackboneSource
from trinity.config_schema.coordinator import Backbone
from trinity.coordinator.backbone_files import KNOWN_ARCHITECTURES, architecture, converted_dir
from trinity.setup.assets import model_cache_dir

ARCH_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")


def _offered_backbones() -> dict[str, dict]:
    out = {}
    for path in sorted((conf_dir() / "coordinator").glob("*.yaml")):
        backbone = (yaml.safe_load(path.read_text()) or {}).get("backbone") or {}
        if backbone.get("id"):
            out[path.stem] = backbone
    return out


def test_every_offered_backbone_has_a_known_architecture():
    offered = _offered_backbones()
    assert offered, "no coordinator option names a backbone"
    missing = {name: b["id"] for name, b in offered.items() if b["id"] not in KNOWN_ARCHITECTURES}
    assert not missing, f"conf/coordinator options whose backbone trinity plan cannot size: {missing}"


def test_the_table_matches_every_converted_backbone_on_this_machine():
    hf = model_cache_dir(None) / "hf"
    checked = 0
    for name, known in KNOWN_ARCHITECTURES.items():
        config = hf / name / "config.json"
        if not config.is_file():
            continue
        data = json.loads(config.read_text())
        data = data.get("text_config", data)
        heads = data["num_attention_heads"]
        actual = {**data, "head_dim": data.get("head_dim") or data["hidden_size"] // heads}
        assert {k: actual[k] for k in ARCH_KEYS} == {k: known[k] for k in ARCH_KEYS}, name
        checked += 1
    assert checked >= 1, f"no converted backbone under {hf}: `make setup` converts the default one"


def test_a_config_json_on_disk_wins_over_the_table(tmp_path):
    folder = converted_dir(tmp_path, "smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 7, "num_attention_heads": 1}}))
    asset = Backbone(source=BackboneSource.asset, id="smollm2-135m-instruct")
    assert architecture(asset, tmp_path)["hidden_size"] == 7
    assert architecture(asset, tmp_path / "empty")["hidden_size"] == 576
    assert architecture(Backbone(source=BackboneSource.hub, id=str(folder)), None)["hidden_size"] == 7
    assert architecture(Backbone(source=BackboneSource.hub, id="no-such/model"), tmp_path) is None
