"""The learned parameters as ONE flat vector, the form the evolution strategy works on.

Layout (documented contract; saved coordinators record it):

    [ svf(matrix_0) | svf(matrix_1) | ... | head ]

- svf(matrix_i): one offset per singular value of the i-th configured SVF matrix, in config order
  (length min(out, in) of that matrix). Absent when SVF is off.
- head: the routing head's (L + 3) x d weights, row-major (row r = logit r: agents in pool order, then
  worker, thinker, verifier).
x = 0 is the untouched backbone with a zero head (uniform routing).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def zeros(self) -> np.ndarray:
        return np.zeros(self.size)

    def check(self, params: np.ndarray) -> np.ndarray:
        params = np.asarray(params, dtype=np.float64).ravel()
        if params.size != self.size:
            raise ValueError(f"parameter vector has {params.size} numbers, the layout needs {self.size}")
        return params

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
        return self.check(params)[self.svf_size :].reshape(self.head_shape).copy()

    def describe(self) -> list[dict]:
        """Segments with their offsets, for metadata and reports."""
        segments, start = [], 0
        for name, n in self.svf_matrices:
            segments.append({"kind": "svf", "name": name, "start": start, "size": n})
            start += n
        segments.append({"kind": "head", "name": "head", "start": start, "size": self.head_size, "shape": list(self.head_shape)})
        return segments
