"""What byte-compiling the dependencies costs in `make setup`, and how: pip's own compile (one core) against
`pip install --no-compile` followed by `compileall` on every core, each in a fresh virtual environment of this
checkout, side by side in one run. After each install, one fresh process imports the stack every stage imports
(torch, transformers, prefect, polars, dvc, cma, httpx, hydra) twice: the first import reads the compiled files the
install left, and with PYTHONDONTWRITEBYTECODE set (as on the machines the project runs on) nothing is compiled for
later, so a stack left uncompiled costs every process of every stage its compile again (the `pip --no-compile` row).

    python benchmarks/setup_compile.py [--out docs/benchmarks/setup_compile/results.json]

Needs the package indexes `make setup` uses (pip's cache makes the installs local); takes about 8 minutes on
2 cores. Writes only under a temporary folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STACK = "import torch, transformers, prefect, polars, dvc.repo, cma, httpx, hydra"
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
WAYS = {
    "pip compiles (one core)": [["{pip}", "install", "-q", "-e", ".[dev]"]],
    "pip --no-compile, then compileall on every core": [
        ["{pip}", "install", "-q", "--no-compile", "-e", ".[dev]"],
        ["{python}", "-m", "compileall", "-q", "-j", "0", "{purelib}"]],
    "pip --no-compile, nothing compiled": [["{pip}", "install", "-q", "--no-compile", "-e", ".[dev]"]],
}


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def measure(way: str, steps: list[list[str]], work: Path) -> dict:
    clone = work / "clone"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    venv = clone / ".venv"
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    purelib = subprocess.run([python, "-c", PURELIB], capture_output=True, text=True, check=True).stdout.strip()
    names = {"pip": f"{python} -m pip", "python": python, "purelib": purelib}
    seconds = []
    for step in steps:
        cmd = [part.format(**names) for part in step]
        cmd = cmd[0].split() + cmd[1:]
        # compileall exits 1 when some file does not compile (a template, a test of another Python): as pip, go on
        seconds.append(round(_timed(cmd, clone, env, check="compileall" not in cmd), 1))
    imports = [round(_timed([python, "-c", STACK], clone, env), 2) for _ in range(2)]
    row = {"way": way, "install_s": round(sum(seconds), 1), "steps_s": seconds, "import_stack_s": imports}
    print(f"{way}: install {row['install_s']} s ({' + '.join(map(str, seconds))}); one process importing the "
          f"stack {imports[0]} s, again {imports[1]} s", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from command_times import cpu_flags, cpu_name, vector_units

    with tempfile.TemporaryDirectory(prefix="trinity-setup-compile-") as tmp:
        rows = [measure(way, steps, Path(tmp)) for way, steps in WAYS.items()]
    result = {"date": dt.date.today().isoformat(), "cpu": cpu_name(), "vector_units": vector_units(cpu_flags()),
              "cores": os.cpu_count(), "rows": rows}
    print(json.dumps(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
