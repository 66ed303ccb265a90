"""benchmarks/recording_rate.py: new calls per hour per machine, from a recording's run log."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("recording_rate", ROOT / "benchmarks" / "recording_rate.py")
recording_rate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recording_rate)


def test_rates_per_run_and_per_machine_leave_out_runs_without_new_calls(tmp_path, capsys):
    cpu = {"cpu": "AMD EPYC", "cpus": 2}
    manifest = {"runs": [{"date": "d1", "machine": cpu, "wall_s": 3600, "items": 2, "new_calls": 100},
                         {"date": "d2", "machine": cpu, "wall_s": 1800, "items": 1, "new_calls": 50},
                         {"date": "d3", "machine": cpu, "wall_s": 600, "items": 40, "new_calls": 0}]}
    out = recording_rate.rates(manifest)
    assert out["machines"] == {"AMD EPYC (2 CPUs)": {"new_calls": 150, "wall_h": 1.5, "calls_per_h": 100.0}}
    assert out["runs"][2]["calls_per_h"] is None
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    recording_rate.main([str(tmp_path), "--json", str(tmp_path / "rate.json")])
    assert "100 new calls per hour" in capsys.readouterr().out
    assert json.loads((tmp_path / "rate.json").read_text())["machines"]


def test_a_recording_readme_shows_commands_without_the_machine_s_folders():
    from trinity.pipeline.record_stage import shown_command

    typed = ("/home/me/repo/.venv/bin/trinity record experiment=local_agents "
             "paths.prepared=/home/me/repo/data/prepared_agents pool.sampling.timeout_s=1800")
    assert shown_command(typed) == ("trinity record experiment=local_agents paths.prepared=data/prepared_agents "
                                    "pool.sampling.timeout_s=1800")
    assert shown_command("") == ""
