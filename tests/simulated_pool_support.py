"""What tests/unit/test_simulated_pool.py and tests/integration/test_simulated_pool_http.py share (no tests here): a
free port, prepared items, a config on the simulated pool and the body of a worker process."""

import socket

import pytest

from trinity import config
from trinity.pipeline.suites import prepare_from_config


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    cfg = config.load(None, ["experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]",
                             "tasks.max_items_per_suite=12", f"paths.prepared={root / 'prepared'}"])
    prepare_from_config(cfg, cfg.paths.prepared)
    return root


def _cfg(root, tmp_path, *overrides):
    return config.load(None, ["experiment=routing_benchmark", "tasks.train=[mmlu,gsm8k]",
                              f"paths.prepared={root / 'prepared'}", f"pool.state_dir={tmp_path / 'pool'}",
                              f"pool.port={_free_port()}", *overrides])


def _worker_body(cfg, model: str, item, seed: int, **extra) -> dict:
    return {"model": cfg.pool.models[model].model_id, "seed": seed, **extra,
            "messages": [{"role": "system", "content": cfg.protocol.worker_system},
                         {"role": "user", "content": item.prompt + "\n\n" + cfg.protocol.collaboration_instructions}]}

