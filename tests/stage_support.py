"""The `scripted` fixture (no tests here): a composed config in tmp_path on a scripted pool with a tiny random
backbone, on which the ablate and evolve stages run end to end (tests/integration/test_ablations_run.py,
tests/integration/test_evolve_diagnostics_run.py)."""

from __future__ import annotations

import pytest
from coordinator_support import tiny_backbone
from omegaconf import OmegaConf
from scripted_pool import ScriptedPool

from trinity import config


class _Pool(ScriptedPool):
    async def aclose(self) -> None:
        pass

    def totals(self) -> dict:
        return {"calls": self.count}


@pytest.fixture()
def scripted(tmp_path, monkeypatch):
    """Composed config in tmp_path with prepared MMLU items, states for the default token position, a
    tiny backbone, and a scripted pool where one model always answers right."""
    from trinity.coordinator import coordinator as coordinator_module
    from trinity.pipeline.cache_states_stage import run as cache_states
    from trinity.pipeline.suites import prepare_from_config
    from trinity.pool.client import PoolClient
    from trinity.tasks.prepare import load_items

    cfg = config.compose(["experiment=local_live",
        "tasks.train=[mmlu]", "tasks.transfer=[]", "tasks.max_items_per_suite=24",
        "evolve.popsize=4", "evolve.generations=2", "evolve.episodes_per_candidate=2", "evolve.validation.every=1",
        "evolve.validation.n_items=2", "evolve.max_concurrent_episodes=8", "protocol.max_turns=2",
        "coordinator.backbone.id=tiny-llama", "ablations.variants=[reinforce,no_roles,last_token,svf]",
        "ablations.enabled=true",
        f"paths.data={tmp_path}/data", f"paths.prepared={tmp_path}/data/prepared",
        f"paths.states={tmp_path}/data/states",
        f"paths.runs={tmp_path}/data/evolve", f"paths.metrics={tmp_path}/metrics", f"paths.reports={tmp_path}/reports",
        f"paths.cache={tmp_path}/cache",
    ])
    OmegaConf.set_struct(cfg, False)
    cfg.paths.ablations = f"{tmp_path}/data/ablations"
    cfg.ablations.definitions.svf = {"coordinator.svf.enabled": True,  # the tiny backbone has 4 layers
                                     "coordinator.svf.matrices": ["model.layers.2.self_attn.*_proj",
                                                                  "model.layers.2.mlp.*_proj"]}
    cfg = config.validate(cfg)
    monkeypatch.setattr(coordinator_module, "load_backbone", lambda *a, **k: tiny_backbone())
    prepare_from_config(cfg, cfg.paths.prepared)
    items = {it.prompt.strip()[:200]: it for it in load_items(cfg.paths.prepared, "mmlu")}
    oracle = list(cfg.pool.models)[1]

    def worker(right: bool):
        def reply(messages, sample_index):
            user = messages[-1]["content"]
            item = next(it for key, it in items.items() if user.startswith(key))
            letter = item.reference["answer"] if isinstance(item.reference, dict) else item.reference
            return f"The answer is ({letter if right else 'Z'}). <idea>checked</idea>"
        return reply

    pools: list[_Pool] = []

    def make_pool(*args, **kwargs):
        script = {(m, "worker"): worker(m == oracle) for m in cfg.pool.models}
        script.update({"verifier": "ACCEPT",
                       "thinker": "<suggestion>check</suggestion><suggested_role>worker</suggested_role>"})
        pools.append(_Pool(cfg.protocol, script))
        return pools[-1]

    monkeypatch.setattr(PoolClient, "from_config", staticmethod(make_pool))
    cache_states(cfg)  # first-turn features at the default token position (a last-token variant must skip them)
    yield cfg, pools
