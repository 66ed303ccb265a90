"""`coordinator.backbone.dtype`: the named dtypes, and `auto` (bfloat16 where the device computes it natively,
float32 elsewhere), resolved before the backbone loads so that every cache key and state file names the dtype
that computed it, never "auto"."""

from __future__ import annotations

import pytest
import torch
from coordinator_support import save_tiny_backbone

from trinity.config_schema import section
from trinity.config_schema.coordinator import Backbone
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
    cfg = section({"id": overrides["coordinator.backbone.id"], "source": "hub", "dtype": "auto", "device": "cpu"},
                  Backbone, "coordinator.backbone")
    loaded = bb.load_backbone(cfg)
    want = torch.bfloat16 if native else torch.float32
    assert loaded.dtype == want
    assert {p.dtype for p in loaded.model.parameters()} == {want}


@pytest.mark.parametrize("dtype, device, capability, machine, amx, want", [
    (torch.bfloat16, "cpu", "AVX2", "x86_64", True, "eager"),   # pinned below AVX-512 with AMX: fused attention refuses
    (torch.float16, "cpu", "AVX2", "x86_64", True, "eager"),
    (torch.bfloat16, "cpu", "AVX2", "x86_64", False, None),     # no AMX: nothing packs, the fused attention runs
    (torch.bfloat16, "cpu", "AVX512", "x86_64", True, None),    # unpinned AVX-512 CPU: the library's SDPA
    (torch.float32, "cpu", "AVX2", "x86_64", True, None),       # float32 never takes the packed path
    (torch.bfloat16, "cpu", "DEFAULT", "aarch64", True, None),  # not x86: no AMX packing
    (torch.bfloat16, "cuda", "AVX2", "x86_64", True, None),
])
def test_half_precision_on_a_pinned_amx_cpu_uses_eager_attention(monkeypatch, dtype, device, capability, machine,
                                                                 amx, want):
    import platform

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert bb.attention_implementation(dtype, torch.device(device)) == want


def test_a_bfloat16_backbone_reads_a_long_prompt_on_this_cpu(tmp_path):
    """Under the default pinning (ATen at AVX2) a bfloat16 forward pass of a long prompt runs: on an AMX CPU torch's
    fused attention refused it before the backbone switched to eager attention there."""
    from coordinator_support import tiny_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    # SmolLM2-135M's attention shape: 9 heads of 64 dimensions, 3 key-value heads
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=576, intermediate_size=256,
                                         num_hidden_layers=1, num_attention_heads=9, num_key_value_heads=3))
    model.save_pretrained(tmp_path / "heads64")
    tokenizer.save_pretrained(tmp_path / "heads64")
    cfg = section({"id": str(tmp_path / "heads64"), "source": "hub", "dtype": "bfloat16", "device": "cpu"},
                  Backbone, "coordinator.backbone")
    loaded = bb.load_backbone(cfg)
    ids = torch.randint(0, loaded.model.config.vocab_size, (2, 300))
    mask = torch.ones_like(ids)
    mask[1, :40] = 0   # left padding, as the feature engine batches
    with torch.no_grad():   # as the feature engine runs it (with gradients on, torch takes another kernel)
        out = loaded.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert out.hidden_states[-1].dtype == torch.bfloat16
    assert torch.isfinite(out.hidden_states[-1][:, -1].float()).all()
