"""SVF (singular-value fine-tuning) of chosen backbone matrices, batched over candidates.

Each chosen matrix W = U diag(S) V^T becomes U diag(S') V^T with S' = S * (1 + delta) rescaled so that
sum(S') = sum(S) (docs/METHOD.md). Factors 1 + delta are clamped at 0 so singular values stay
non-negative. Only delta is learned: one number per singular value.

The chosen modules are wrapped in place. A wrapper with no offsets set runs the ORIGINAL module (not a
reconstruction), so zero offsets reproduce the backbone exactly. During a forward pass each batch row
may carry its own offsets (one candidate per row): the row's matrix is rebuilt from the factors and
applied with a batched matmul, so many candidates share one forward pass.

How each kind of matrix is handled:
- a linear layer inside a decoder layer: adapted as above; the features of a candidate are recomputed
  only from the first adapted layer onward (the activations entering it are shared, see features/engine.py);
- the token embeddings: adapted row-wise (rows U[ids] diag(S') V^T for the prompt's tokens only, never
  the full vocab x d matrix); every layer then depends on the offsets, so nothing is shared;
- the LM head (or anything else outside the decoder): the feature is read BEFORE the head, so its
  offsets cannot change any routing decision. They stay in the parameter layout (so the paper's
  parameter count is reproducible) but are inert; a tied head is not touched through the embeddings.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from trinity.errors import ConfigError


def scaled_singular_values(s: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """S' = S * (1 + delta) * sum(S) / sum(S * (1 + delta)); works on (r,) or batched (B, r) offsets."""
    scaled = s * torch.clamp(1.0 + delta, min=0.0)
    total = scaled.sum(dim=-1, keepdim=True)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(total > 0, scaled * (s.sum() / safe), s.expand_as(scaled))


class _SVFWrapper(nn.Module):
    """Holds the original module and its SVD factors; per-row offsets are set only around a forward."""

    u: torch.Tensor   # the buffers registered below
    s: torch.Tensor
    vh: torch.Tensor

    def __init__(self, inner: nn.Module, weight: torch.Tensor):
        super().__init__()
        self.inner = inner
        u, s, vh = torch.linalg.svd(weight.detach().to(torch.float64), full_matrices=False)
        dtype = weight.dtype
        self.register_buffer("u", u.to(dtype), persistent=False)
        self.register_buffer("s", s.to(dtype), persistent=False)
        self.register_buffer("vh", vh.to(dtype), persistent=False)
        self.row_values: torch.Tensor | None = None  # (B_active, r) scaled singular values
        self.row_active: torch.Tensor | None = None  # (B,) bool: rows whose offsets are not all zero

    @property
    def rank(self) -> int:
        return int(self.s.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.row_values is None:
            plain: torch.Tensor = self.inner(x)
            return plain
        active = self.row_active
        assert active is not None  # set together with row_values
        if bool(active.all()):
            return self._adapted(x, self.row_values)
        out_active = self._adapted(x[active], self.row_values)
        out_rest: torch.Tensor = self.inner(x[~active])
        out = out_rest.new_empty((x.shape[0],) + tuple(out_rest.shape[1:]))
        out[active] = out_active
        out[~active] = out_rest
        return out

    def _adapted(self, x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class SVFLinear(_SVFWrapper):
    inner: nn.Linear

    def __init__(self, inner: nn.Linear):
        super().__init__(inner, inner.weight)

    def _adapted(self, x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        weights = torch.matmul(self.u * values[:, None, :], self.vh)  # (B, out, in)
        y = torch.matmul(x, weights.transpose(1, 2))
        return y if self.inner.bias is None else y + self.inner.bias


class SVFEmbedding(_SVFWrapper):
    def __init__(self, inner: nn.Embedding):
        super().__init__(inner, inner.weight)

    def _adapted(self, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.u[ids] * values[:, None, :], self.vh)


@dataclass(frozen=True)
class SVFSlot:
    name: str
    rank: int
    kind: str  # "layer" (inside decoder layer `layer`), "embedding", "decoder" (elsewhere in the decoder) or "inert"
    layer: int | None


class SVFAdapter:
    """The configured SVF matrices of one backbone, in parameter-vector order."""

    def __init__(self, backbone: Any, patterns: Sequence[str]):
        self.backbone = backbone
        model = backbone.model
        named = dict(model.named_modules())
        names: list[str] = []
        for pattern in patterns:
            hits = [n for n, m in named.items() if fnmatch.fnmatchcase(n, pattern)
                    and isinstance(m, (nn.Linear, nn.Embedding))]
            if not hits:
                raise ConfigError(f"config key 'coordinator.svf.matrices': '{pattern}' matches no "
                                  "linear or embedding module")
            names.extend(n for n in hits if n not in names)
        decoder_ids = {id(m) for m in backbone.decoder.modules()}
        layer_of = {id(m): i for i, layer in enumerate(backbone.layers) for m in layer.modules()}
        self.slots: list[SVFSlot] = []
        self.wrappers: list[_SVFWrapper | None] = []
        for name in names:
            module = named[name]
            rank = min(module.weight.shape)
            if id(module) not in decoder_ids:
                self.slots.append(SVFSlot(name, rank, "inert", None))
                self.wrappers.append(None)
                continue
            wrapper = SVFEmbedding(module) if isinstance(module, nn.Embedding) else SVFLinear(module)
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, wrapper)
            layer = layer_of.get(id(module))
            kind = "embedding" if isinstance(module, nn.Embedding) else ("layer" if layer is not None else "decoder")
            self.slots.append(SVFSlot(name, rank, kind, layer))
            self.wrappers.append(wrapper)

    @property
    def matrices(self) -> tuple[tuple[str, int], ...]:
        return tuple((s.name, s.rank) for s in self.slots)

    @property
    def size(self) -> int:
        return sum(s.rank for s in self.slots)

    @property
    def affects_features(self) -> bool:
        return any(s.kind != "inert" for s in self.slots)

    @property
    def first_adapted_layer(self) -> int:
        """Index of the first decoder layer whose input depends on the offsets (0: from the embeddings)."""
        live = [s for s in self.slots if s.kind != "inert"]
        if not live or any(s.kind != "layer" for s in live):
            return 0
        return min(s.layer for s in live if s.layer is not None)  # every "layer" slot has its layer

    @property
    def reuses_activations(self) -> bool:
        """True when candidates can start from shared activations (only decoder-layer matrices adapted)."""
        live = [s for s in self.slots if s.kind != "inert"]
        return bool(live) and all(s.kind == "layer" for s in live)

    def is_identity(self, deltas: np.ndarray | None) -> bool:
        """True when these offsets leave the features unchanged (all zero, or only inert matrices)."""
        if deltas is None or not self.affects_features:
            return True
        start = 0
        for slot in self.slots:
            if slot.kind != "inert" and np.any(deltas[start : start + slot.rank] != 0):
                return False
            start += slot.rank
        return True

    def set_rows(self, rows: Sequence[np.ndarray | None]) -> None:
        """Give each batch row its offsets (None or zeros: that row runs the original weights)."""
        start = 0
        for slot, wrapper in zip(self.slots, self.wrappers, strict=True):
            if wrapper is not None:
                parts = [None if r is None else r[start : start + slot.rank] for r in rows]
                active = [p is not None and bool(np.any(p != 0)) for p in parts]
                if any(active):
                    # active: p is not None
                    chosen = [p for p, a in zip(parts, active, strict=True) if a and p is not None]
                    delta = torch.as_tensor(np.stack(chosen), dtype=wrapper.s.dtype, device=wrapper.s.device)
                    wrapper.row_values = scaled_singular_values(wrapper.s, delta)
                    wrapper.row_active = torch.tensor(active, device=wrapper.s.device)
                else:
                    wrapper.row_values = wrapper.row_active = None
            start += slot.rank

    def clear(self) -> None:
        for wrapper in self.wrappers:
            if wrapper is not None:
                wrapper.row_values = wrapper.row_active = None
