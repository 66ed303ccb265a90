"""Build the serving app from the composed config and a saved coordinator; run it with uvicorn.

    app = build_app(cfg, coordinator_path)            # loads and checks the coordinator, opens the pool
    app = build_app(cfg, frontier=folder)             # a cost-quality frontier: one head per request
    app = build_app(cfg, registry=folder)             # the registry's champion, following promotions
    serve(cfg, coordinator_path)                      # blocking (the CLI): checks, local pool, uvicorn
    with ServerThread(app) as server: server.base_url # in a background thread (tests, benchmarks)

Shutdown (SIGTERM, Ctrl-C, ServerThread.stop) drains: the app stops admitting at once (requests waiting for
an episode slot get 503), uvicorn closes the listening socket and gives the responses in flight, streams
included, serve.drain_timeout_s to finish before it cancels them; then the app closes its pool client and
`serve` stops the pool servers it started.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from trinity.config_schema import TrinityConfig
from trinity.serve.preflight import check_saved_pool, reserve_port
from trinity.serve.settings import ServeSettings

if TYPE_CHECKING:
    # imported where the app is built: they load torch and the backbone's libraries (seconds), and `serve`
    # refuses a wrong coordinator or a taken port before that
    import socket

    from fastapi import FastAPI

    from trinity.serve.request_episode import EpisodeRunner, Runner


def build_app(cfg: TrinityConfig, coordinator_path: str | os.PathLike | None = None, *, frontier: Any = None,
              registry: Any = None, backbone: Any = None, pool: Any = None):
    """The FastAPI app for `cfg` with the coordinator saved at `coordinator_path` (a folder holding
    coordinator.safetensors, or the file), or with the heads of the cost-quality frontier in the folder
    `frontier` (trinity.serve.frontier_heads), or with the champion of the model registry in the folder
    `registry`, swapped when another is promoted (trinity.serve.registry_runner). A coordinator saved for
    another pool or backbone is refused (CoordinatorMismatchError). `backbone` and `pool` replace the
    configured ones (tests)."""
    import dataclasses

    from trinity.assembly.coordinator import load_coordinator
    from trinity.assembly.pool_client import pool_client
    from trinity.coordinator.saved import coordinator_file
    from trinity.serve.app import create_app
    from trinity.serve.request_episode import EpisodeRunner

    if sum(x is not None for x in (coordinator_path, frontier, registry)) != 1:
        raise ValueError("serve one coordinator, one frontier or one registry")
    settings = ServeSettings.from_config(cfg)
    settings.check_exposure()
    served = None
    if registry is not None:
        from trinity.models.store import ModelRegistry, ModelRegistryError

        registry = ModelRegistry(registry)
        champion = registry.champion()
        if champion is None:
            raise ModelRegistryError(f"--registry {registry.root}: no champion to serve (`trinity models promote V`)")
        coordinator_path = champion.coordinator
    if frontier is not None:
        from trinity.serve.frontier_heads import ServedFrontier

        served = ServedFrontier.load(frontier)
        settings = dataclasses.replace(settings, frontier=True)
        if served.routing != settings.config.routing:
            import logging

            logging.getLogger("trinity.serve").warning(
                "the frontier's figures were measured with %s routing; serve.routing is %s, so the heads' real "
                "costs and rewards may differ from frontier.json", served.routing, settings.config.routing)
        coordinator_path = served.heads[0].file
    assert coordinator_path is not None  # exactly one of the three was given (checked above)
    coordinator, params = load_coordinator(coordinator_file(Path(coordinator_path)), cfg, backbone=backbone)
    own_pool = pool is None
    if own_pool:
        cache_path = Path(cfg.paths.cache) / "responses.sqlite" if settings.config.response_cache != "off" else None
        pool = pool_client(cfg, cache_path=cache_path, cache_mode=settings.config.response_cache)

    def runner_for(head_params) -> EpisodeRunner:
        return EpisodeRunner(pool, list(cfg.pool.models), cfg.protocol,
                             coordinator.router_for(head_params, mode=settings.config.routing), root_seed=cfg.seed,
                             answer_first=settings.config.answer_first)

    if registry is not None:
        from trinity.serve.registry_runner import RegistryRunner

        def version_runner(version) -> EpisodeRunner:
            # the champion loaded at start-up is `params`; a later one is read and checked in full here
            loaded = params if version.coordinator == coordinator_path else coordinator.read_params(version.coordinator)
            return runner_for(loaded)

        watcher = RegistryRunner(registry, version_runner, poll_s=float(cfg.serve.registry_poll_s)).start()
        runner: Runner = watcher
    elif served is None:
        runner = runner_for(params)
    else:
        from trinity.serve.frontier_heads import FrontierRunner

        # one backbone and feature service for every head: only the linear heads differ
        runner = FrontierRunner(served, {h.name: runner_for(coordinator.read_params(h.file)) for h in served.heads})

    async def close() -> None:
        if registry is not None:
            watcher.stop()
        if own_pool:
            await pool.aclose()
        coordinator.service.close()

    return create_app(settings, runner, on_shutdown=close)


def serve(cfg: TrinityConfig, coordinator_path: str | os.PathLike | None = None, *,
          frontier: str | os.PathLike | None = None, registry: str | os.PathLike | None = None) -> None:
    """`trinity serve`: a replayed pool (`pool.replay`, as the embedded default trains on) is served live
    (trinity.config.live_pool: the models its recording was made from), saying so; refuse what can be refused
    before anything starts (the live pool's API keys, exposure, the coordinator's file, pool and roles, or every
    frontier head's; a taken port; trinity.serve.preflight), then start the pool's
    local servers if the config has any, build the app and serve on the port reserved first. On Ctrl-C and
    SIGTERM it drains (module doc); the servers this started are stopped on exit, on Ctrl-C and on SIGTERM
    (uvicorn re-raises the signal once it has shut down)."""
    import contextlib
    import logging

    from trinity.assembly.local_pool import local_servers
    from trinity.config import check_api_keys, live_pool

    # what it serves, then one line per episode: id, end reason, turns, tokens, cost
    log = logging.getLogger("trinity.serve")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False   # one line each, not a second through the root logger's handler
    replayed = cfg.pool.replay
    cfg = live_pool(cfg)
    if replayed is not None:
        log.info("pool '%s' is replayed from the recording %s, which answers only its recorded items: serving over "
                 "its live pool, the models it was recorded from (%s)", cfg.pool.name, replayed.recording,
                 ", ".join(cfg.pool.models))
    check_api_keys(cfg)   # the live pool's keys
    settings = ServeSettings.from_config(cfg)
    settings.check_exposure()
    if frontier is not None:
        from trinity.serve.frontier_heads import ServedFrontier

        for head in ServedFrontier.load(frontier).heads:
            check_saved_pool(cfg, head.file)
    elif registry is not None:
        from trinity.models.store import ModelRegistry, ModelRegistryError

        champion = ModelRegistry(registry).champion()
        if champion is None:
            raise ModelRegistryError(f"--registry {registry}: no champion to serve (`trinity models promote V`)")
        check_saved_pool(cfg, champion.coordinator)
    else:
        assert coordinator_path is not None  # `trinity serve` takes exactly one of the three
        check_saved_pool(cfg, coordinator_path)
    # a pool config error, too, before the port is taken
    local = local_servers(cfg.pool, model_cache=cfg.paths.model_cache)
    with (contextlib.closing(reserve_port(settings.config.host, settings.config.port)) as sock,
          local if local is not None else contextlib.nullcontext()):  # stops only the servers it started
        app = build_app(cfg, coordinator_path, frontier=frontier, registry=registry)
        server = DrainingServer(app, host=settings.config.host, port=settings.config.port, log_level="info",
                                access_log=True)
        # uvicorn names the address only for sockets it binds itself
        host = f"[{settings.config.host}]" if ":" in settings.config.host else settings.config.host
        log.info("serving '%s' on http://%s:%d/v1", settings.config.model_name, host, sock.getsockname()[1])
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a person stops it: no traceback (as uvicorn.run)
            server.run(sockets=[sock])


class DrainingServer(uvicorn.Server):
    """uvicorn for an app of create_app: its shutdown tells the app first (module doc) and lasts at most the
    app's serve.drain_timeout_s."""

    def __init__(self, app: FastAPI, **config: Any):
        drain_s = app.state.settings.config.drain_timeout_s
        super().__init__(uvicorn.Config(app, timeout_graceful_shutdown=drain_s, **config))
        self.admission = app.state.admission

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.admission.close()   # before uvicorn's first await: nothing is admitted after this
        await super().shutdown(sockets)


class ServerThread:
    """uvicorn on loopback in a daemon thread; port 0 picks a free port. Stopping it drains as `serve` does."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.server = DrainingServer(app, host=host, port=port, log_level=log_level, access_log=False,
                                     limit_concurrency=None)
        self.host = host
        self._thread = threading.Thread(target=self._run, name="trinity-serve", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as e:  # surfaced by start()
            self.error = e

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 60) -> ServerThread:
        self._thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout_s * 20)):
            if self.server.started or self.error is not None or not self._thread.is_alive():
                break
            deadline.wait(0.05)
        if not self.server.started:
            raise RuntimeError(f"the server did not start: {self.error!r}")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(float(self.server.config.timeout_graceful_shutdown or 0) + 10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
