"""Why `make test` runs each test process on one torch/OpenMP/BLAS thread (Makefile TEST_THREADS): as many
processes as `make test` has pytest-xdist workers (the cores + 1) each run the same torch work (SVDs like the
coordinator's SVF set-up, small linear layers like a backbone's), once with the libraries' default threads and
once with one thread each, alternating; the wall time of the slowest process and the CPU-seconds of all.

    python benchmarks/test_threads.py [--workers N] [--rounds 2] [--size 1536]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

WORK = """
import resource, time, torch
w = torch.randn({size}, 576, dtype=torch.float64)
x, layer = torch.randn(64, 576), torch.nn.Linear(576, {size})
t = time.perf_counter()
for _ in range(3):
    torch.linalg.svd(w, full_matrices=False)
with torch.no_grad():
    for _ in range(300):
        layer(x)
r = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, r.ru_utime + r.ru_stime, torch.get_num_threads())
"""

LIMITS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def run_batch(workers: int, size: int, one_thread: bool) -> tuple[float, float, int]:
    env = {k: v for k, v in os.environ.items() if k not in LIMITS}
    if one_thread:
        env.update({k: "1" for k in LIMITS})
    procs = [subprocess.Popen([sys.executable, "-c", WORK.format(size=size)], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(workers)]
    outs = [p.communicate()[0].split() for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed")
    return max(float(o[0]) for o in outs), sum(float(o[1]) for o in outs), int(outs[0][2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=1536)
    args = ap.parse_args()
    results: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
    start = time.time()
    for _ in range(args.rounds):
        for one in (False, True):
            results[one].append(run_batch(args.workers, args.size, one))
    print(f"{args.workers} processes at once on {os.cpu_count()} cores, {args.rounds} rounds alternating "
          f"({time.time() - start:.0f} s):")
    for one, label in ((False, "default threads"), (True, "one thread each")):
        walls = [r[0] for r in results[one]]
        cpus = [r[1] for r in results[one]]
        print(f"  {label:<16} ({results[one][0][2]} per process): wall {statistics.median(walls):6.2f} s, "
              f"CPU {statistics.median(cpus):6.2f} s (medians)")
    default, one = (statistics.median(r[0] for r in results[k]) for k in (False, True))
    print(f"  wall ratio default / one thread: {default / one:.2f}x")


if __name__ == "__main__":
    main()
