"""What the graders' unit and integration tests share (no tests here): the grader-agreement benchmark script
loaded as a module, math answers that would take a naive grader forever, and short sandbox limits."""

from benchmark_support import load_benchmark

from trinity.sandbox import SandboxLimits


def _module():
    return load_benchmark("grader_agreement")


PATHOLOGICAL = ["10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", "{" * 3000 + "1" + "}" * 3000,
                "\\frac{1}{" * 300 + "2" + "}" * 300, "1+" * 20000 + "1"]

# one CPU-second: every program of these tests but the spinning ones takes a tenth of it, and a spinning one
# burns the whole limit before it is killed
FAST = SandboxLimits(wall_s=6, cpu_s=1, memory_mb=1024, nproc=16)
