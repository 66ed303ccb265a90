"""TRINITY: an evolved LLM coordinator, as a reproducible pipeline. See `trinity.cli` for the command line.

At import, two things happen, both settings the math libraries read from the environment when they load.

`quiet_threads()`: OpenMP's idle threads (torch's, which compute the coordinator's features) go to sleep at once
instead of spinning for a while after every operation (OMP_WAIT_POLICY=PASSIVE). On a machine whose cores something
else wants too (a local pool's llama.cpp servers beside `trinity serve`, a test suite), spinning threads take the cores
from the thread that has the work: measured on a 2-core CPU with two other busy processes, a one-line request's
feature took seconds with spinning threads and a fifth of a second without (benchmarks/feature_paths.py --busy 2,
docs/benchmarks/feature_paths). Nothing computed changes, only who waits how. A value the user set is kept;
TRINITY_PASSIVE_THREADS=0 leaves OpenMP's own default; programs trinity starts that are not its own (the llama.cpp
servers) get the environment without it (`foreign_environment()`).

`pin_numerics()`. One code path for CPU float arithmetic on every x86
machine of a vendor, so that the cached states (and every stage hash that follows from them) are the same
bytes on another CPU. MKL (matrix products) and ATen (element-wise kernels) choose their instructions by the CPU:
on an AVX-512 CPU they take AVX-512 paths, elsewhere AVX2 ones, and the two round differently in the last
bits (benchmarks/state_determinism.py measures it). Both libraries read a switch from the environment when
they load: MKL_CBWR (MKL's conditional numerical reproducibility) and ATEN_CPU_CAPABILITY; numpy's
OpenBLAS (the head's products in evolution) reads OPENBLAS_CORETYPE, and numpy itself NPY_DISABLE_CPU_FEATURES:
its float64 exp, log and power (the head's softmax, the fitness's entropy, pycma's updates) run AVX-512 kernels
where the CPU has them and round otherwise than its AVX2 path (libm) does, which moved evolution's outputs in their last
digits (benchmarks/evolve_determinism.py). `pin_numerics()` sets them to the AVX2 paths (OpenBLAS's Haswell kernels;
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


def pin_numerics(environ: os._Environ[str] | dict[str, str] = os.environ) -> dict[str, str]:
    """Set the switches in `environ` unless the user set them or TRINITY_PIN_NUMERICS=0; returns what is
    in effect. A switch whose library is already loaded in this process (it has read the environment) is
    left alone: setting it then would only mislead a child process into looking pinned."""
    if environ.get("TRINITY_PIN_NUMERICS", "1") != "0":
        for key, value in PINNED.items():
            if not (environ is os.environ and READ_BY[key] in sys.modules):
                environ.setdefault(key, value)
    return {k: environ[k] for k in PINNED if k in environ}


pin_numerics()

THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}
_SET_HERE: set[str] = set()   # the keys quiet_threads set in this process's environment (not the user's)


def quiet_threads(environ: os._Environ[str] | dict[str, str] = os.environ) -> dict[str, str]:
    """Set THREADS in `environ` unless the user set them, TRINITY_PASSIVE_THREADS=0, or (for this process) torch is
    already loaded, its OpenMP having read the environment; returns what is in effect."""
    if environ.get("TRINITY_PASSIVE_THREADS", "1") != "0":
        own = environ is os.environ
        for key, value in THREADS.items():
            if key not in environ and not (own and "torch" in sys.modules):
                environ[key] = value
                if own:
                    _SET_HERE.add(key)
    return {k: environ[k] for k in THREADS if k in environ}


def foreign_environment() -> dict[str, str]:
    """This process's environment for a program that is not trinity's (a llama.cpp server, which runs OpenMP threads
    of its own): without what quiet_threads set here, so it runs with its own defaults or the user's settings."""
    return {k: v for k, v in os.environ.items() if k not in _SET_HERE}


quiet_threads()

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
