"""A command line that chooses another pool than its experiment's, while that experiment is made for its own
pool's recording (the embedded default: record.name=local-agents), is refused with what to type instead
(trinity.config.check_pool_choice); the same pool live, its replay, or a recording named on the command
line pass. Through the real command line: `trinity record` and `trinity plan --record` refuse before
anything is read or called, and `trinity config` (inspection) composes it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trinity import config
from trinity.errors import ConfigError


def _check(overrides, records=False):
    config.check_pool_choice(config.load(None, overrides), overrides, records=records)


def test_another_pool_under_the_defaults_recording_is_refused_naming_the_keys_and_the_fix():
    with pytest.raises(ConfigError) as refused:
        _check(["pool=simulated"], records=True)
    message = str(refused.value)
    assert "pool=simulated is not the pool of experiment=local_agents (pool=recorded_agents" in message
    assert "record.name=local-agents" in message and "data/recordings/local-agents" in message
    assert "experiment=routing_benchmark" in message          # the experiment made for that pool
    assert "record.name=<folder>" in message
    with pytest.raises(ConfigError, match=r"write conf/experiment/<name>.yaml choosing it"):
        _check(["pool=vllm_example"], records=True)            # no experiment chooses it: how to write one
    with pytest.raises(ConfigError, match="settings made for another pool's recording"):
        _check(["pool=recorded"])                              # replays local-agents with the local models


@pytest.mark.parametrize("overrides", [
    ["pool=local_agents"],                                     # the default's pool, live
    ["pool=replay"],                                           # its recording, replayed from the manifest
    ["pool=simulated", "record.name=rehearsal"],               # the recording named on the command line
    ["experiment=local_small", "pool=local"],                  # local_small's pool, live
    ["experiment=routing_benchmark", "pool=simulated"],        # an experiment that names no recording
    ["evolve.generations=2"],                                  # no pool chosen
])
def test_the_same_pool_or_a_named_recording_passes(overrides):
    _check(overrides, records=True)


def test_trinity_record_refuses_and_trinity_config_shows_it():
    refused = subprocess.run([sys.executable, "-m", "trinity.cli", "record", "--status", "pool=simulated"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "experiment=routing_benchmark" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    shown = subprocess.run([sys.executable, "-m", "trinity.cli", "config", "pool=simulated"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "name: simulated" in shown.stdout, shown.stderr
