"""The coordinator's features on this CPU, every way they can run here, side by side in one run: for each
way (float32 or bfloat16; trinity's pinned numerics or each library's own choice; 1 or 2 threads; OpenMP threads that
sleep when idle, as trinity sets them, or spin) a fresh process loads the default backbone (SmolLM2-135M) and measures

- `route p50`: the feature of one new one-line chat request, as `POST /v1/route` computes it (prefix KV
  store on, content cache off: every prompt is new), the median over `--requests` prompts, in ms;
- `states/s`: first-turn states of `--states` prepared prompts in batches of `feature_cache.max_batch`, as
  the cache_states stage and evaluate's feature pass compute them (isolated: no reuse between prompts);
- `rel. error`: max |feature - float32 pinned feature| / max |float32 pinned feature| over those prompts;
- `routes kept`: for each head saved under `--heads` (default: the candidates the evolve stage saved), the share of
  those prompts whose first-turn argmax agent and role this way's features leave as the float32 pinned ones give
  (the lowest over the heads): a faster way that moves routes serves another coordinator than the one evaluated;
- `floor`: the arithmetic floor of the one-line request: its computed tokens x the decoder's multiply-adds per
  token x 2 / the peak GFLOP/s of one (64 x 576) @ (576 x 1536) product in that dtype on this CPU. No batching,
  caching or kernel choice can go under it; only fewer tokens, fewer bits or another CPU can.

    .venv/bin/python benchmarks/feature_paths.py [--requests 20] [--states 48]
        [--out docs/benchmarks/feature_paths/results.json]
    .venv/bin/python benchmarks/feature_paths.py --busy 2 --out docs/benchmarks/feature_paths/busy.json

`--busy N` keeps N other processes spinning on the CPU throughout, as a local pool's llama.cpp servers or a test
suite do beside `trinity serve` or a stage: what each way does when it does not have the cores to itself.

Needs data/prepared (`make run`). Ways alternate (all ways once, then again, `--rounds` times) so load drift on a
shared machine hits every way alike; each figure is the median over rounds. Prints a table and writes the
results file (with the CPU's model and flags) that docs/benchmarks/feature_paths/README.md quotes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, statistics
from trinity import config   # first: importing trinity pins the math libraries (unless TRINITY_PIN_NUMERICS=0)
import numpy as np, torch
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
from trinity.assembly.coordinator import coordinator_from_config
from trinity.config_schema import typed
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.protocol import first_turn_transcript
from trinity.pipeline.items import load_split
cfg = typed(config.compose([f"coordinator.backbone.dtype={args['dtype']}", "coordinator.feature_cache.disk=false",
                            "coordinator.feature_cache.memory_items=0"]))
coord = coordinator_from_config(cfg)
protocol = ProtocolConfig.from_config(cfg.protocol)
engine = coord.engine

def request(i):
    text = first_turn_transcript(protocol, f"What is {17 + i} * {23 + 2 * i}? Answer with the number only.")
    before = dict(engine.stats)
    t0 = time.perf_counter()
    engine.features([text])
    return time.perf_counter() - t0, engine.stats["computed_tokens"] - before["computed_tokens"]

for i in range(3):
    request(1000 + i)   # warm-up: the template's shared prefix enters the KV store
runs = [request(i) for i in range(args["requests"])]
latency = statistics.median(t for t, _ in runs)
tokens = statistics.median(n for _, n in runs)

items = load_split(cfg, list(cfg.tasks.train), "test")[: args["states"]]
texts = [first_turn_transcript(protocol, it.prompt) for it in items]
t0 = time.perf_counter()
feats = coord.precompute(texts, isolated=True)
states_s = len(texts) / (time.perf_counter() - t0)
np.save(args["out"], np.asarray(feats, dtype=np.float32))

dtype = coord.backbone.dtype
a, b = torch.randn(64, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
with torch.inference_mode():
    for _ in range(5):
        torch.nn.functional.linear(a, b)
    t0 = time.perf_counter()
    for _ in range(200):
        torch.nn.functional.linear(a, b)
    peak = 200 * 2 * 64 * 576 * 1536 / (time.perf_counter() - t0) / 1e9
macs = sum(m.weight.numel() for m in coord.backbone.decoder.modules() if isinstance(m, torch.nn.Linear))
floor_ms = 1000 * tokens * 2 * macs / (peak * 1e9)
print(json.dumps({"route_ms": 1000 * latency, "tokens": tokens, "states_s": states_s, "peak_gflops": peak,
                  "floor_ms": floor_ms, "dtype": str(dtype).replace("torch.", "")}))
"""

# (label, dtype, pinned, threads, environment). Every trinity process sets OMP_WAIT_POLICY=PASSIVE (its idle OpenMP
# threads sleep at once, trinity.quiet_threads); TRINITY_PASSIVE_THREADS=0 leaves OpenMP's default, spinning a while
WAYS = [
    ("float32, pinned (trinity's default)", "float32", True, 2, {}),
    ("float32, pinned, spinning OpenMP threads", "float32", True, 2, {"TRINITY_PASSIVE_THREADS": "0"}),
    ("float32, pinned, 1 thread", "float32", True, 1, {}),
    ("float32, library default", "float32", False, 2, {}),
    ("bfloat16, pinned", "bfloat16", True, 2, {}),
    ("bfloat16, library default", "bfloat16", False, 2, {}),
    ("bfloat16, library default, 1 thread", "bfloat16", False, 1, {}),
]


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("avx512_bf16", "amx", "avx512f", "avx2", "avx512_vnni")))


def routes_kept(feats: dict, ref, heads: list[Path]) -> dict[str, float]:
    """Per way, the lowest share over `heads` of prompts whose turn-0 argmax (agent, role) equals the reference's."""
    if not heads:
        return {}
    import numpy as np

    from trinity import config
    from trinity.assembly.coordinator import coordinator_from_config

    coord = coordinator_from_config(config.load(None, ["coordinator.feature_cache.disk=false"]))
    out: dict[str, float] = {}
    for path in heads:
        head = coord.head_for(coord.read_params(path))

        def picks(rows, head=head):
            return [(int(np.argmax(a)), int(np.argmax(r))) for a, r in (head.probabilities(x, turn=0) for x in rows)]

        want = picks(ref)
        for label, rows in feats.items():
            share = float(np.mean([p == w for p, w in zip(picks(rows), want, strict=True)]))
            out[label] = min(out.get(label, 1.0), share)
    return out


def run_way(label: str, dtype: str, pinned: bool, threads: int, extra: dict[str, str], requests: int, states: int,
            out: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    for key in ("TRINITY_PIN_NUMERICS", "OMP_WAIT_POLICY", "TRINITY_PASSIVE_THREADS"):
        env.pop(key, None)
    env.update(extra)
    if not pinned:
        env["TRINITY_PIN_NUMERICS"] = "0"
        for key in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES"):
            env.pop(key, None)
    args = {"threads": threads, "dtype": dtype, "requests": requests, "states": states, "out": out}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{label}: the child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace, runs: dict[str, list[dict]]) -> list[dict]:
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        feats: dict[str, np.ndarray] = {}
        for r in range(args.rounds):
            for i, (label, dtype, pinned, threads, extra) in enumerate(WAYS):
                out = f"{tmp}/{i}.npy"
                runs[label].append(run_way(label, dtype, pinned, threads, extra, args.requests, args.states, out))
                feats[label] = np.load(out)
                print(f"round {r + 1}/{args.rounds}: {label}: {runs[label][-1]['route_ms']:.1f} ms", file=sys.stderr)
        ref = feats[WAYS[0][0]]
        kept = routes_kept(feats, ref, sorted(ROOT.glob(args.heads)))
        rows = []
        for label, dtype, pinned, threads, _ in WAYS:
            med = {k: statistics.median(x[k] for x in runs[label])
                   for k in ("route_ms", "tokens", "states_s", "peak_gflops", "floor_ms")}
            err = float(np.max(np.abs(feats[label] - ref)) / np.max(np.abs(ref)))
            rows.append({"way": label, "dtype": dtype, "pinned": pinned, "threads": threads, **med,
                         "rel_error": err, "routes_kept": kept.get(label)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--states", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the results here (JSON)")
    parser.add_argument("--busy", type=int, default=0, help="keep this many other processes spinning throughout")
    parser.add_argument("--heads", default="data/evolve/coordinator/candidates/*.safetensors",
                        help="saved coordinators whose routes each way must keep (a glob; none found: not measured)")
    args = parser.parse_args(argv)
    from trinity import cpu_model

    runs: dict[str, list[dict]] = {label: [] for label, *_ in WAYS}
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        rows = measure(args, runs)
    finally:
        for p in spinners:
            p.kill()
            p.wait()

    base = rows[0]
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores; {' '.join(cpu_flags())})")
    print("| way | route p50 (ms) | computed tokens | floor (ms) | peak GFLOP/s | states/s | x states/s | rel. error "
          "| routes kept |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['way']} | {row['route_ms']:.1f} | {row['tokens']:.0f} | {row['floor_ms']:.1f} | "
              f"{row['peak_gflops']:.0f} | {row['states_s']:.2f} | {row['states_s'] / base['states_s']:.2f} | "
              f"{row['rel_error']:.1e} | {_share(row['routes_kept'])} |")
    result = {"cpu": cpu_model(), "cores": os.cpu_count(), "flags": cpu_flags(), "busy": args.busy,
              "date": datetime.date.today().isoformat(), "requests": args.requests,
              "states": args.states, "rounds": args.rounds, "heads": args.heads, "ways": rows}
    print(json.dumps(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _share(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.0f}%"


if __name__ == "__main__":
    raise SystemExit(main())
