"""`coordinator.backbone.dtype`: the named dtypes, and `auto` (bfloat16 where the device computes it natively,
float32 elsewhere), resolved before the backbone loads so that every cache key and state file names the dtype
that computed it, never "auto"."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from coordinator_support import save_tiny_backbone
from trinity.coordinator import backbone as bb


@pytest.mark.parametrize("name, dtype", [("float32", torch.float32), ("float16", torch.float16),
                                         ("bfloat16", torch.bfloat16), (None, torch.float32)])
def test_named_dtypes(name, dtype):
    assert bb.resolve_dtype(name) == dtype


@pytest.mark.parametrize("native, dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_follows_the_devices_native_bfloat16(monkeypatch, native, dtype):
    seen = []
    monkeypatch.setattr(bb, "native_bfloat16", lambda device: seen.append(device) or native)
    assert bb.resolve_dtype("auto", torch.device("cpu")) == dtype
    assert seen == [torch.device("cpu")]


def test_native_bfloat16_on_cpu_is_onednns_answer_and_unknown_devices_say_no():
    assert bb.native_bfloat16(torch.device("cpu")) == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert bb.native_bfloat16(torch.device("meta")) is False
    if not torch.cuda.is_available():
        assert bb.native_bfloat16(torch.device("cuda")) is False


def test_an_unknown_dtype_names_the_choices():
    with pytest.raises(bb.BackboneError, match="one of auto, float32, float16, bfloat16, got 'float8'"):
        bb.resolve_dtype("float8")


@pytest.mark.parametrize("native", [True, False])
def test_auto_loads_the_backbone_in_the_resolved_dtype(tmp_path, monkeypatch, native):
    monkeypatch.setattr(bb, "native_bfloat16", lambda device: native)
    overrides = dict(o.split("=", 1) for o in save_tiny_backbone(tmp_path / "tiny"))
    cfg = OmegaConf.create({"id": overrides["coordinator.backbone.id"], "source": "hub", "dtype": "auto",
                            "device": "cpu"})
    loaded = bb.load_backbone(cfg)
    want = torch.bfloat16 if native else torch.float32
    assert loaded.dtype == want
    assert {p.dtype for p in loaded.model.parameters()} == {want}
