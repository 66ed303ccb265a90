"""Where a backbone's files are and what its architecture is, without loading it (no torch): the folder an asset
or GGUF backbone is converted into, and the backbone's config.json (from that folder, a local folder or the
hub cache), else the recorded architecture of the backbones conf/coordinator/ offers. trinity.coordinator.backbone
converts into these folders; `trinity plan` reads the architecture for the population size before anything is
downloaded or converted."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trinity.config_schema.coordinator import Backbone

# The architecture of each backbone conf/coordinator/ offers, as in its config.json (hidden size for the head;
# attention shapes for the SVF ranks), for when no config.json is on this machine yet.
KNOWN_ARCHITECTURES: dict[str, dict[str, int]] = {
    "smollm2-135m-instruct": {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64},
    "qwen2.5-coder-0.5b-instruct": {"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
                                    "head_dim": 64},
    "Qwen/Qwen3-0.6B": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128},
    "gemma-3-270m": {"hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256},
}


def converted_dir(model_cache: str | os.PathLike[str] | None, name: str) -> Path:
    """The Hugging Face folder a GGUF backbone named `name` (an asset key, or a GGUF file's stem and tag) is
    converted into, under the model cache."""
    from trinity.setup.assets import model_cache_dir

    return model_cache_dir(model_cache) / "hf" / name


def is_converted(folder: Path) -> bool:
    """Whether a conversion into `folder` finished (its config.json is renamed into place last)."""
    return (folder / "config.json").is_file()


def architecture(backbone: Backbone, model_cache: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The typed `coordinator.backbone`'s config.json (its text part for a multimodal model) when this machine has
    it: an asset's converted folder, a local folder, the hub cache; else KNOWN_ARCHITECTURES; else None."""
    source, ident = backbone.source.value, backbone.id
    paths: list[Path | None] = []
    if source == "asset":
        paths.append(converted_dir(model_cache, ident) / "config.json")
    elif source == "hub":
        paths.append(Path(ident).expanduser() / "config.json")
        paths.append(_hub_cached_config(ident, backbone.revision))
    for path in paths:
        if path is not None and path.is_file():
            try:
                data: dict[str, Any] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            data = data.get("text_config", data)
            if data.get("hidden_size"):
                return data
    return KNOWN_ARCHITECTURES.get(ident)


def _hub_cached_config(ident: str, revision: Any) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(ident, "config.json", revision=revision)
    except Exception:   # not a hub id, no hub library: the table decides
        return None
    return Path(found) if isinstance(found, str) else None
