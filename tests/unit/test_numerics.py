"""CPU numerics are pinned to one code path at import (trinity.pin_numerics), so cached states and evolution's
outputs are the same bytes on other x86 CPUs; a user's own setting wins, and TRINITY_PIN_NUMERICS=0 turns pinning
off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trinity as numerics

# numpy's active dispatch targets after `import trinity`; -W error makes numpy's ImportWarning about a CPU feature
# name it does not know (NPY_DISABLE_CPU_FEATURES, e.g. after numpy renames its targets) fail the probe
NUMPY_PROBE = ("import json, trinity, numpy; "
               "from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__; "
               "print(json.dumps([k for k in __cpu_dispatch__ if __cpu_features__.get(k)]))")
PROBE = ("import json, os, trinity, torch; print(json.dumps({'cap': torch.backends.cpu.get_cpu_capability(), "
         "'mkl': os.environ.get('MKL_CBWR'), 'aten': os.environ.get('ATEN_CPU_CAPABILITY')}))")


def _probe(probe: str = PROBE, **env: str):
    full = {k: v for k, v in os.environ.items() if k not in (*numerics.PINNED, "TRINITY_PIN_NUMERICS")}
    full.update(env)
    out = subprocess.run([sys.executable, "-W", "error::ImportWarning", "-c", probe], env=full, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pin_sets_every_switch_and_keeps_the_users():
    env: dict[str, str] = {}
    assert numerics.pin_numerics(env) == numerics.PINNED and env == numerics.PINNED
    mine = {"MKL_CBWR": "COMPATIBLE"}
    assert numerics.pin_numerics(mine) == {**numerics.PINNED, "MKL_CBWR": "COMPATIBLE"}
    off = {"TRINITY_PIN_NUMERICS": "0"}
    assert numerics.pin_numerics(off) == {} and "MKL_CBWR" not in off


def _has_avx2() -> bool:
    try:
        return " avx2" in open("/proc/cpuinfo").read()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx2(), reason="the pinned path is x86 AVX2; this CPU has none")
def test_importing_trinity_first_puts_torch_on_the_avx2_path():
    pinned = _probe()
    assert (pinned["mkl"], pinned["aten"]) == ("AVX2,STRICT", "avx2")
    assert pinned["cap"] == "AVX2"
    free = _probe(TRINITY_PIN_NUMERICS="0")
    assert free["mkl"] is None and free["aten"] is None


@pytest.mark.skipif(not _has_avx2(), reason="the pinned path is x86 AVX2; this CPU has none")
def test_importing_trinity_first_keeps_numpy_off_its_avx512_kernels():
    """numpy's float64 exp and log round otherwise on its AVX-512 targets (benchmarks/evolve_determinism.py):
    pinned, numpy runs its AVX2 (x86-64-v3) loops, as on a CPU without AVX-512, and knows every name it was given."""
    pinned = _probe(NUMPY_PROBE)
    assert "X86_V3" in pinned and not {"X86_V4", "AVX512_ICL", "AVX512_SPR"} & set(pinned)
    if " avx512f" in Path("/proc/cpuinfo").read_text():
        assert "X86_V4" in _probe(NUMPY_PROBE, TRINITY_PIN_NUMERICS="0")   # free, numpy takes this CPU's AVX-512


@pytest.mark.skipif(not _has_avx2(), reason="the pinned path is x86 AVX2; this CPU has none")
@pytest.mark.skipif(os.environ.get("TRINITY_PIN_NUMERICS") == "0" or "ATEN_CPU_CAPABILITY" in os.environ
                    and os.environ["ATEN_CPU_CAPABILITY"] != numerics.PINNED["ATEN_CPU_CAPABILITY"],
                    reason="the run itself chose other numerics")
def test_the_test_process_computes_on_the_pinned_path_as_trinitys_commands_do():
    """tests/conftest.py imports trinity before any test module loads torch: a test's in-process forward passes
    take the same kernels as the stages it is compared with."""
    import torch

    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_quiet_threads_sets_the_passive_wait_and_keeps_the_users():
    env: dict[str, str] = {}
    assert numerics.quiet_threads(env) == {"OMP_WAIT_POLICY": "PASSIVE"} == env
    mine = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert numerics.quiet_threads(mine) == {"OMP_WAIT_POLICY": "ACTIVE"}
    off = {"TRINITY_PASSIVE_THREADS": "0"}
    assert numerics.quiet_threads(off) == {} and "OMP_WAIT_POLICY" not in off


def test_trinitys_own_processes_wait_passively_and_the_programs_it_starts_do_not_inherit_it():
    """A fresh process importing trinity has OMP_WAIT_POLICY=PASSIVE before torch loads; the environment it hands a
    llama.cpp server (foreign_environment) lacks it, unless the user had set it."""
    probe = ("import json, os, trinity; print(json.dumps({'own': os.environ.get('OMP_WAIT_POLICY'), "
             "'foreign': trinity.foreign_environment().get('OMP_WAIT_POLICY')}))")
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "TRINITY_PASSIVE_THREADS")}

    def run(env: dict[str, str]) -> dict:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run(base) == {"own": "PASSIVE", "foreign": None}
    assert run({**base, "OMP_WAIT_POLICY": "ACTIVE"}) == {"own": "ACTIVE", "foreign": "ACTIVE"}
    assert run({**base, "TRINITY_PASSIVE_THREADS": "0"}) == {"own": None, "foreign": None}
