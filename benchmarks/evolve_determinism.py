"""Are evolution's stored outputs the same bytes on another CPU? The states are (docs/benchmarks/state_determinism),
but evolution computes on them in float64 with numpy: the head's products (OpenBLAS), its softmax and the fitness's
entropy (numpy's exp and log), pycma's updates. numpy picks its exp, log and power kernels by the CPU's instruction
set (AVX-512 ones where the CPU has them, the AVX2 path's libm elsewhere) and OpenBLAS its kernels by the CPU's
model, and a different kernel rounds differently in the last bit: enough to change `best_validation_reward` in its
16th digit, so data/evolve, data/ablations and the metrics in `dvc.lock` and git differ after `make run` on another
CPU.

This machine stands in for other CPUs in two ways, each setting in a fresh process on the embedded default: through
the libraries' own switches (NPY_DISABLE_CPU_FEATURES, OPENBLAS_CORETYPE, MKL_CBWR, ATEN_CPU_CAPABILITY), as
benchmarks/state_determinism.py does, and, with `--qemu`, by running the stage on an emulated CPU (qemu-x86_64
-cpu Haswell: an Intel CPU with AVX2 and no AVX-512; EPYC-Rome: an AMD one), which every library sees as that CPU:

    .venv/bin/python benchmarks/evolve_determinism.py [--generations 60] [--ablate] [--qemu Haswell,EPYC-Rome]

It first runs prepare and cache_states into a temporary folder (the default reads the states shipped with its
recording), then the evolve stage (and with `--ablate` the ablate stage) once per setting, each into its own
folder. Prints one JSON line per setting: the sha256 of the stored outputs (every file the stages write under
data/, metrics/ and reports/; timings and caches are elsewhere), whether they are the bytes the reference (an
AVX2-only CPU, by the switches) writes, which outputs differ, `best_validation_reward` as written, and the seconds
taken. Reads the committed recording and conf/ of the folder it runs in; writes nothing there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SWITCHES = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")
AVX2_ONLY = {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
             "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}

CHILD = r"""
import json, sys, time
from trinity import config   # first: importing trinity pins the math libraries (unless told not to)
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
stages, overrides = sys.argv[1].split(","), json.loads(sys.argv[2])
cfg = config.load(None, overrides)
t0 = time.perf_counter()
from trinity.pipeline.plain_stages import run_stage
for stage in stages:
    run_stage(cfg, stage)
print(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                  "numpy_targets": [k for k in __cpu_dispatch__ if __cpu_features__.get(k)]}))
"""

# (label, environment, trinity's pinning on): what this machine computes with each library's own choice, with
# numpy alone left free (trinity before numpy was pinned), on an AVX2-only CPU's paths by the switches (the
# reference), and trinity's default (pinned at import)
SETTINGS = [
    ("this CPU, every library's own choice", {}, False),
    ("numpy free, the others pinned (trinity before numpy was pinned)",
     {k: v for k, v in AVX2_ONLY.items() if k != "NPY_DISABLE_CPU_FEATURES"}, False),
    ("as an AVX2-only CPU (the libraries' switches)", AVX2_ONLY, False),
    ("trinity's default (pinned at import, this CPU)", {}, True),
]
REFERENCE = 2


def run_child(stages: list[str], overrides: list[str], env: dict[str, str], prefix: list[str]) -> dict:
    done = subprocess.run([*prefix, sys.executable, "-c", CHILD, ",".join(stages), json.dumps(overrides)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(stages)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_env(env: dict[str, str], pinned: bool) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if k not in (*SWITCHES, "TRINITY_PIN_NUMERICS")}
    full.update(env)
    full["TRINITY_PIN_NUMERICS"] = "1" if pinned else "0"
    full["PYTHONDONTWRITEBYTECODE"] = "1"
    return full


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every stored output file under `folder`, by its path there."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def total(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def outputs_of(files: dict[str, str]) -> list[str]:
    """Files named by their stage output (a folder of dvc.yaml's outs, or the file itself)."""
    return sorted({"/".join(p.split("/")[:2]) if p.startswith("data/") else p for p in files})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generations", type=int, default=None, help="evolve.generations (default: the config's)")
    ap.add_argument("--ablate", action="store_true", help="also run the ablate stage in every setting")
    ap.add_argument("--qemu", default="", help="comma-separated qemu-x86_64 CPU models to run trinity's default on")
    ap.add_argument("--keep", default=None, help="keep the outputs in this folder")
    args = ap.parse_args()
    stages = ["evolve"] + (["ablate"] if args.ablate else [])
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="evolve-determinism-"))
    shared = tmp / "shared"
    inputs = [f"paths.prepared={shared}/data/prepared", f"paths.states={shared}/data/states"]
    run_child(["prepare", "cache_states"], inputs + [f"paths.metrics={shared}/metrics", f"paths.cache={shared}/cache",
                                                     f"paths.timings={shared}/timings"], child_env({}, True), [])
    if args.generations is not None:
        inputs.append(f"evolve.generations={args.generations}")
    settings = [(label, env, pinned, []) for label, env, pinned in SETTINGS]
    for model in filter(None, args.qemu.split(",")):
        if not shutil.which("qemu-x86_64"):
            raise SystemExit("--qemu needs qemu-x86_64 (apt-get install qemu-user)")
        settings.append((f"an emulated {model} CPU (qemu-x86_64), trinity's default", {}, True,
                         ["qemu-x86_64", "-cpu", model]))
    rows = []
    try:
        for i, (label, env, pinned, prefix) in enumerate(settings):
            out, run_dir = tmp / f"s{i}" / "out", tmp / f"s{i}" / "run"
            overrides = inputs + [
                f"paths.runs={out}/data/evolve", f"paths.ablations={out}/data/ablations",
                f"paths.metrics={out}/metrics", f"paths.reports={out}/reports", f"paths.cache={run_dir}/cache",
                f"paths.timings={run_dir}/timings"]
            facts = run_child(stages, overrides, child_env(env, pinned), prefix)
            metrics = json.loads((out / "metrics" / "evolve.json").read_text())
            rows.append({"label": label, "env": env, "pinned": pinned, "cpu": " ".join(prefix[2:]) or "this",
                         "numpy_targets": facts["numpy_targets"], "files": digests(out),
                         "best_validation_reward": repr(metrics.get("best_validation_reward")),
                         "seconds": facts["seconds"]})
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    ref = rows[REFERENCE]["files"]
    for row in rows:
        files = row.pop("files")
        changed = {p: h for p, h in files.items() if ref.get(p) != h}
        row.update(stages=stages, generations=args.generations, sha256=total(files),
                   same_bytes_as_avx2_cpu=files == ref, differing_outputs=outputs_of(changed))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
