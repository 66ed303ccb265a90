"""The learned parameters as ONE flat vector, the form the evolution strategy works on.

Layout (documented contract; saved coordinators record it):

    [ svf(matrix_0) | svf(matrix_1) | ... | head ] [ | turn prior ]

- svf(matrix_i): one offset per singular value of the i-th configured SVF matrix, in config order
  (length min(out, in) of that matrix). Absent when SVF is off.
- head: the routing head's (L + 3) x d weights, row-major (row r = logit r: agents in pool order, then
  worker, thinker, verifier).
- turn prior (optional, never evolved): k x (L + 3) logits, row t added to the head's logits at turn t
  (trinity.coordinator.head). Only a coordinator kept as a constant policy (or a head with one) carries one
  (trinity.pipeline.constant_policy); its length says k. `size` counts what evolution searches (SVF + head),
  so a vector of exactly `size` numbers has no prior.
x = 0 is the untouched backbone with a zero head (uniform routing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trinity.contracts import ROLES


@dataclass(frozen=True)
class ParamLayout:
    svf_matrices: tuple[tuple[str, int], ...]  # (module name, number of singular values), in vector order
    n_agents: int
    hidden_size: int

    @property
    def svf_size(self) -> int:
        return sum(n for _, n in self.svf_matrices)

    @property
    def head_shape(self) -> tuple[int, int]:
        return (self.n_agents + len(ROLES), self.hidden_size)

    @property
    def head_size(self) -> int:
        return self.head_shape[0] * self.head_shape[1]

    @property
    def size(self) -> int:
        return self.svf_size + self.head_size

    @property
    def prior_row(self) -> int:
        """Numbers per turn of a per-turn prior: one logit per agent and role."""
        return self.head_shape[0]

    def zeros(self) -> np.ndarray:
        return np.zeros(self.size)

    def check(self, params: np.ndarray) -> np.ndarray:
        params = np.asarray(params, dtype=np.float64).ravel()
        extra = params.size - self.size
        if extra < 0 or extra % self.prior_row:
            raise ValueError(f"parameter vector has {params.size} numbers, the layout needs {self.size} (+ "
                             f"{self.prior_row} per turn of a per-turn prior)")
        return params

    def prior_turns(self, params: np.ndarray) -> int:
        """Turns of the per-turn prior `params` carries (0: none)."""
        return (self.check(params).size - self.size) // self.prior_row

    def turn_bias(self, params: np.ndarray) -> np.ndarray | None:
        """The per-turn prior as (turns, L + 3) logits, or None when `params` has none."""
        params = self.check(params)
        turns = (params.size - self.size) // self.prior_row
        return params[self.size :].reshape(turns, self.prior_row).copy() if turns else None

    def searched(self, params: np.ndarray) -> np.ndarray:
        """`params` without its per-turn prior: the part evolution searches."""
        return self.check(params)[: self.size].copy()

    def with_turn_bias(self, params: np.ndarray, turn_bias: np.ndarray | None) -> np.ndarray:
        """The searched part of `params` followed by `turn_bias` ((turns, L + 3); None: no prior)."""
        base = self.searched(params)
        if turn_bias is None:
            return base
        bias = np.asarray(turn_bias, dtype=np.float64)
        if bias.ndim != 2 or bias.shape[1] != self.prior_row or not len(bias):
            raise ValueError(f"a per-turn prior must have shape (turns, {self.prior_row}), got {bias.shape}")
        return np.concatenate([base, bias.ravel()])

    def svf_deltas(self, params: np.ndarray) -> np.ndarray | None:
        """The SVF part of `params` (all matrices concatenated), or None when SVF is off."""
        params = self.check(params)
        return params[: self.svf_size].copy() if self.svf_size else None

    def split_svf(self, svf_part: np.ndarray) -> list[np.ndarray]:
        out, start = [], 0
        for _, n in self.svf_matrices:
            out.append(np.asarray(svf_part[start : start + n]))
            start += n
        return out

    def head_weights(self, params: np.ndarray) -> np.ndarray:
        return self.check(params)[self.svf_size : self.size].reshape(self.head_shape).copy()

    def describe(self, params: np.ndarray | None = None) -> list[dict[str, Any]]:
        """Segments with their offsets, for metadata and reports (the per-turn prior's when `params` has one)."""
        segments, start = [], 0
        for name, n in self.svf_matrices:
            segments.append({"kind": "svf", "name": name, "start": start, "size": n})
            start += n
        segments.append({"kind": "head", "name": "head", "start": start, "size": self.head_size,
                         "shape": list(self.head_shape)})
        turns = 0 if params is None else self.prior_turns(params)
        if turns:
            segments.append({"kind": "turn_prior", "name": "turn_prior", "start": self.size,
                             "size": turns * self.prior_row, "shape": [turns, self.prior_row]})
        return segments
