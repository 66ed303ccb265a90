"""`trinity run` for real: the stages' `python` is this environment's interpreter whatever comes first on
PATH, and one Prefect server serves every stage of a run and stops after. The arguments and params.yaml:
tests/unit/test_repro.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from process_support import migrated_prefect_home, wait_for
from serve_process import pid_alive

from trinity import repro

pytestmark = pytest.mark.integration


def test_stage_commands_run_this_interpreter(tmp_path):
    """A stage whose cmd says `python` gets the interpreter running trinity, even with another first on PATH."""
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "python").write_text("#!/bin/sh\necho decoy > which.txt\n")
    (decoy / "python").chmod(0o755)
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  probe:\n    cmd: python -c \"import sys; open('which.txt', 'w').write(sys.executable)\"\n"
        "    outs:\n      - which.txt\n")
    subprocess.run([*repro.dvc_executable(), "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    env = {**os.environ, "PATH": f"{decoy}{os.pathsep}{os.environ.get('PATH', '')}"}
    code = ("import sys; from trinity import repro; "
            "sys.exit(repro.run(['probe', 'seed=5'], "
            f"root=__import__('pathlib').Path({str(tmp_path)!r}), server=False))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "which.txt").read_text() == sys.executable
    assert "seed: 5" in (tmp_path / "params.yaml").read_text()
    assert "params.yaml updated" in result.stdout


def test_one_prefect_server_serves_every_stage_of_a_run_and_stops_after(tmp_path):
    """Both stages of a run reach the same server through PREFECT_API_URL; it is stopped when the run ends; a
    run with nothing to do starts none; a PREFECT_API_URL of the user's is used as it is."""
    probe = ("python -c \"import os, httpx; u = os.environ['PREFECT_API_URL']; "
             "open('{out}', 'w').write(u + ' ' + str(httpx.get(u + '/health').status_code))\"")
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  first:\n    cmd: {probe.format(out='a.txt')}\n    outs:\n      - a.txt\n"
        f"  second:\n    cmd: {probe.format(out='b.txt')}\n    deps:\n      - a.txt\n    outs:\n      - b.txt\n")
    subprocess.run([*repro.dvc_executable(), "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(migrated_prefect_home(tmp_path / "prefect"))
    code = ("import sys; from trinity import repro; "
            f"sys.exit(repro.run([], root=__import__('pathlib').Path({str(tmp_path)!r})))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = (tmp_path / "a.txt").read_text(), (tmp_path / "b.txt").read_text()
    assert first == second and first.endswith("/api 200"), (first, second)
    assert "Prefect server for this run" in result.stdout
    # the server's own process has ended (its port may already serve another run's server: other tests start
    # theirs on the same preferred port, so the port alone proves nothing)
    pid = int(re.search(r"\(pid (\d+)\)", result.stdout).group(1))
    wait_for(lambda: not pid_alive(pid), 10, f"the run's Prefect server (pid {pid}) to be gone after the run")
    assert (tmp_path / "prefect" / "server.log").is_file()
    again = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=400)
    assert again.returncode == 0 and "Prefect server" not in again.stdout, again.stdout + again.stderr

    with repro.pipeline_server({"PREFECT_API_URL": "http://example.invalid/api"}) as api:
        assert api == "http://example.invalid/api"
