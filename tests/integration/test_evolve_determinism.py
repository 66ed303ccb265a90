"""Evolution's stored outputs are the same bytes on any x86-64 CPU with AVX2 (docs/REPRODUCIBILITY.md): numpy picks
its exp and log kernels by the CPU (AVX-512 ones round otherwise than its AVX2 path), so trinity pins numpy with
the other math libraries at import. A small evolution on a recording (exact fitness, sep-CMA-ES, validation), the
evolve stage in a fresh process each time, as benchmarks/evolve_determinism.py runs the default: trinity's default
on this CPU writes the bytes an AVX2-only CPU writes (this CPU forced onto its paths by the libraries' switches),
and on a CPU with AVX-512 numpy left free writes others, so this test sees what the pin is for. The backbone is the
tiny random one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from recording_support import make_recording

from trinity.config import to_yaml, with_values

pytestmark = pytest.mark.integration   # real processes and services: make test, not test-fast

# What an AVX2-only x86-64 CPU computes with, written out here rather than read from trinity.PINNED
AVX2_ONLY = {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
             "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}

CHILD = r"""
import sys
from trinity import config   # first: importing trinity pins the math libraries (unless told not to)
from trinity.pipeline import evolve_stage
evolve_stage.run(config.load(sys.argv[1], []))
"""


def _has_avx2() -> bool:
    try:
        return " avx2" in open("/proc/cpuinfo").read()
    except OSError:
        return False


@pytest.fixture(scope="module")
def recorded_cfg(tmp_path_factory, tiny_backbone_overrides):
    from trinity.pipeline import cache_states_stage

    tmp = tmp_path_factory.mktemp("evolve-determinism")
    cfg, root, _server = make_recording(tmp, roles=("worker", "verifier"), overrides=tuple(tiny_backbone_overrides))
    cfg = with_values(cfg, {"pool.replay": {"recording": str(root), "on_miss": "error"},
                            "coordinator.roles": ["worker", "verifier"], "paths.states": str(tmp / "states"),
                            "paths.metrics": str(tmp / "metrics"), "evolve.popsize": 8, "evolve.generations": 12,
                            "evolve.sigma0": 0.5, "evolve.validation": {"every": 3, "n_items": 2, "select": "one_se"}})
    cache_states_stage.run(cfg)
    return cfg


def evolve_bytes(cfg, folder: Path, env: dict[str, str]) -> dict[str, str]:
    """Run the evolve stage in a fresh process with `env` over the switches; sha256 of every file it stores."""
    out = folder / "out"
    cfg = with_values(cfg, {f"paths.{key}": str(value) for key, value in {
        "runs": out / "data/evolve", "metrics": out / "metrics", "reports": out / "reports", "cache": folder / "cache",
        "timings": folder / "timings"}.items()})
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_text(to_yaml(cfg))
    full = {k: v for k, v in os.environ.items() if k not in (*AVX2_ONLY, "TRINITY_PIN_NUMERICS")}
    full.update(env)
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder / "params.yaml")], env=full, timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    files = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(out.rglob("*")) if p.is_file()}
    assert "metrics/evolve.json" in files and "data/evolve/generations.parquet" in files
    return files


@pytest.mark.skipif(not _has_avx2(), reason="the pinned path is x86 AVX2; this CPU has none")
def test_evolution_writes_the_bytes_of_an_avx2_only_cpu(recorded_cfg, tmp_path):
    pinned = evolve_bytes(recorded_cfg, tmp_path / "pinned", {})
    avx2 = evolve_bytes(recorded_cfg, tmp_path / "avx2", {**AVX2_ONLY, "TRINITY_PIN_NUMERICS": "0"})
    assert pinned == avx2
    if " avx512f" in Path("/proc/cpuinfo").read_text():
        # numpy on its AVX-512 kernels (trinity before numpy was pinned): other bytes, in the tables and metrics
        free = {k: v for k, v in AVX2_ONLY.items() if k != "NPY_DISABLE_CPU_FEATURES"}
        unpinned = evolve_bytes(recorded_cfg, tmp_path / "free", {**free, "TRINITY_PIN_NUMERICS": "0"})
        assert {p for p in avx2 if unpinned.get(p) != avx2[p]} >= {"metrics/evolve.json",
                                                                    "data/evolve/generations.parquet"}
