"""TRINITY: an evolved LLM coordinator, as a reproducible pipeline. See `trinity.cli` for the command line.

At import, one thing happens: `pin_numerics()`. One code path for CPU float arithmetic on every x86
machine of a vendor, so that the cached states (and every stage hash that follows from them) are the same
bytes on another CPU. MKL (matrix products) and ATen (element-wise kernels) choose their instructions by the CPU:
on an AVX-512 CPU they take AVX-512 paths, elsewhere AVX2 ones, and the two round differently in the last
bits (benchmarks/state_determinism.py measures it). Both libraries read a switch from the environment when
they load: MKL_CBWR (MKL's conditional numerical reproducibility) and ATEN_CPU_CAPABILITY; numpy's
OpenBLAS (the head's products in evolution) reads OPENBLAS_CORETYPE, and numpy itself NPY_DISABLE_CPU_FEATURES:
its float64 exp, log and power (the head's softmax, the fitness's entropy, pycma's updates) run AVX-512 kernels
where the CPU has them and round otherwise than its AVX2 path (libm) does, which moved evolution's outputs in their last digits
(benchmarks/evolve_determinism.py). `pin_numerics()` sets them to the AVX2 paths (OpenBLAS's Haswell kernels;
numpy's x86-64-v3 loops, its AVX-512 targets switched off by numpy 2.4's names), which every x86-64 CPU of the
last ten years has, before torch or numpy is imported, MKL in its strict mode (",STRICT": its matrix products
give the same bits for any number of threads; without it an Intel CPU's states differed between one and two
threads). A value the user set is kept; TRINITY_PIN_NUMERICS=0 turns pinning off. Other architectures (ARM)
ignore the switches, and MKL honours its branches on Intel CPUs only: an AMD CPU computes other states
(docs/REPRODUCIBILITY.md measures it), which is why recordings ship their states; numpy and OpenBLAS, which
evolution computes with, choose by instruction set alone, so pinned they give the same bytes on either vendor.
"""

from __future__ import annotations

import os
import sys

# numpy 2.4 names its dispatch targets by x86-64 level (X86_V3 = AVX2, X86_V4 = AVX-512) and ignores, with a
# hidden ImportWarning, names it does not know (the older AVX512F, AVX512_SKX): tests/unit/test_numerics.py checks
# that the pinned numpy runs none of its AVX-512 targets.
NUMPY_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
PINNED = {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
          "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512}
READ_BY = {"MKL_CBWR": "torch", "ATEN_CPU_CAPABILITY": "torch", "OPENBLAS_CORETYPE": "numpy",
           "NPY_DISABLE_CPU_FEATURES": "numpy"}


def pin_numerics(environ: "os._Environ[str] | dict[str, str]" = os.environ) -> dict[str, str]:
    """Set the switches in `environ` unless the user set them or TRINITY_PIN_NUMERICS=0; returns what is
    in effect. A switch whose library is already loaded in this process (it has read the environment) is
    left alone: setting it then would only mislead a child process into looking pinned."""
    if environ.get("TRINITY_PIN_NUMERICS", "1") != "0":
        for key, value in PINNED.items():
            if not (environ is os.environ and READ_BY[key] in sys.modules):
                environ.setdefault(key, value)
    return {k: environ[k] for k in PINNED if k in environ}


pin_numerics()

__version__ = "0.1.0"


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it (None elsewhere): timings and rounding differ by CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
