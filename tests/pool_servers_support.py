"""What tests/unit/test_pool_servers.py and tests/integration/test_pool_servers_live.py share (no tests here): the
local_live config with free ports for its local model servers."""


from pool_stub import free_ports

from trinity import config


def _cfg(tmp_path, models=None, **extra):
    from omegaconf import OmegaConf

    cfg = config.compose(["experiment=local_live", f"pool.state_dir={tmp_path / 'pool'}"])
    OmegaConf.set_struct(cfg, False)
    names = list(cfg.pool.models)
    ports = free_ports(len(names))
    for name, port in zip(names, ports, strict=True):
        cfg.pool.models[name].port = port
        cfg.pool.models[name].n_parallel = 1
    if models is not None:
        for name in names:
            if name not in models:
                del cfg.pool.models[name]
    for k, v in extra.items():
        cfg.pool[k] = v
    return config.validate(cfg)

