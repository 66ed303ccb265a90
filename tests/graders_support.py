"""What the graders' unit and integration tests share (no tests here): the grader-agreement benchmark script
loaded as a module, math answers that would take a naive grader forever, and short sandbox limits."""

import importlib.util
from pathlib import Path

from trinity.sandbox import SandboxLimits

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "grader_agreement.py"


def _module():
    spec = importlib.util.spec_from_file_location("grader_agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PATHOLOGICAL = ["10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", "{" * 3000 + "1" + "}" * 3000,
                "\\frac{1}{" * 300 + "2" + "}" * 300, "1+" * 20000 + "1"]

FAST = SandboxLimits(wall_s=6, cpu_s=3, memory_mb=1024, nproc=16)
