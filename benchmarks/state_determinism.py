"""Are the cached first-turn states the same bytes on another CPU? The states are float32 outputs of the
backbone on the CPU; MKL (the matrix products) and ATen (the element-wise kernels) pick their code path by
the CPU's instruction set, and a different path rounds differently. A state that differs in its last bit
changes the stage's output hash, so every later DVC stage reruns and `dvc.lock` changes.

This machine stands in for other CPUs by forcing the code paths another CPU would take, through the
libraries' own switches (MKL_CBWR, ATEN_CPU_CAPABILITY), each in a fresh process:

    .venv/bin/python benchmarks/state_determinism.py [--prompts 48]
    .venv/bin/python benchmarks/state_determinism.py --speed 16 [--rounds 2]   # what pinning costs

`--speed N` instead times the first N recorded later-turn transcripts of the default (what cache_states
spends most of its time on), pinned and unpinned in turn, `--rounds` times each, side by side in one run.

Needs data/prepared (`make run` or `trinity prepare`). Prints one JSON line per setting: the sha256 of the
features, whether they are the bytes an AVX2-only CPU computes, the largest absolute difference to those, and the
seconds taken. The first three run without trinity's pinning (TRINITY_PIN_NUMERICS=0: each library's own choice,
or the forced one); the last is trinity's default (trinity.pin_numerics), which must give the AVX2-only CPU's bytes
on this CPU too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, sys, time
from trinity import config   # first: importing trinity pins the math libraries (unless told not to)
import numpy as np
from trinity.assembly.coordinator import coordinator_from_config
from trinity.episodes.protocol import first_turn_transcript
from trinity.config_schema.protocol import ProtocolConfig
from trinity.pipeline.items import load_split
n, out = int(sys.argv[1]), sys.argv[2]
cfg = config.load()
coord = coordinator_from_config(cfg)
protocol = ProtocolConfig.from_config(cfg.protocol)
items = load_split(cfg, list(cfg.tasks.train), "test")[:n]
texts = [first_turn_transcript(protocol, it.prompt) for it in items]
t0 = time.perf_counter()
feats = coord.precompute(texts, isolated=True)
np.save(out, np.asarray(feats, dtype=np.float32))
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

# (label, environment, pinned): this CPU as it is, forced onto an AVX2-only CPU's paths, forced onto an
# AVX-512 CPU's paths, and trinity's pinned default (what every trinity command computes, on any x86 CPU)
SETTINGS = [
    ("this CPU, library default", {}, False),
    ("as an AVX2-only CPU", {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2"}, False),
    ("as an AVX-512 CPU", {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}, False),
    ("trinity pinned (this CPU)", {}, True),
]


def run(label: str, env: dict, pinned: bool, n: int, tmp: Path) -> dict:
    out = tmp / f"{len(list(tmp.iterdir()))}.npy"
    full = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")}
    full.update(env)
    full["TRINITY_PIN_NUMERICS"] = "1" if pinned else "0"
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), str(out)], env=full, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{label}: {done.stderr[-2000:]}")
    seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    feats = np.load(out)
    return {"label": label, "pinned": pinned, "env": env, "feats": feats, "seconds": round(seconds, 2),
            "sha256": hashlib.sha256(feats.tobytes()).hexdigest()[:16]}


SPEED_CHILD = r"""
import json, sys, time
from trinity import config   # first: importing trinity pins the math libraries, torch must load after it
import torch
from trinity.assembly.coordinator import coordinator_from_config
from trinity.pipeline.cache_states_stage import by_suite_items, recorded_transcripts
n = int(sys.argv[1])
cfg = config.load()
coord = coordinator_from_config(cfg)
items = by_suite_items(cfg, list(cfg.tasks.train))
later = [t for _, t in recorded_transcripts(cfg, items)][:n]
tokens = sum(len(coord.engine.tokens(t)) for t in later)
t0 = time.perf_counter()
coord.precompute(later, isolated=True)
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "transcripts": len(later),
                  "tokens": tokens, "seconds": round(time.perf_counter() - t0, 1)}))
"""


def speed(n: int, rounds: int) -> None:
    for r in range(rounds):
        for pinned in (True, False):
            env = {k: v for k, v in os.environ.items()
                   if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")}
            env["TRINITY_PIN_NUMERICS"] = "1" if pinned else "0"
            done = subprocess.run([sys.executable, "-c", SPEED_CHILD, str(n)], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-2000:])
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row.update(round=r, pinned=pinned, tok_per_s=round(row["tokens"] / row["seconds"], 1))
            print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--speed", type=int, default=None, help="time N recorded transcripts pinned vs unpinned")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.speed:
        speed(args.speed, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(label, env, pinned, args.prompts, Path(tmp)) for label, env, pinned in SETTINGS]
    ref = rows[1]["feats"]   # an AVX2-only CPU: what the pinned path must equal
    for row in rows:
        feats = row.pop("feats")
        row["same_bytes_as_avx2_cpu"] = bool(np.array_equal(feats, ref))
        row["max_abs_diff_to_avx2_cpu"] = float(np.max(np.abs(feats - ref)))
        row["prompts"] = args.prompts
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
