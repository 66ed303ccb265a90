"""A model's connection lanes: its concurrency limit (`max_concurrency`) as single-connection clients.

Each lane is one httpx client with one connection, carrying one request at a time, so a model with `size`
lanes never has more than `size` requests in flight (per event loop). Why not one client with `size`
pooled connections: httpcore's pool rescans every connection for every queued request, which at 64
concurrent requests cost ~10 ms of CPU per call; a lane has nothing to scan.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import httpx


class ConnectionLanes:
    def __init__(self, size: int, make_client: Callable[[], httpx.AsyncClient]):
        self._make_client = make_client
        self._clients: list[httpx.AsyncClient | None] = [None] * size
        self._free = list(range(size - 1, -1, -1))  # a stack: the most recently used (warm) lane first
        self._slots = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """A free lane's client for one request; waits while every lane is busy."""
        async with self._slots:
            lane = self._free.pop()
            try:
                client = self._clients[lane]
                if client is None:
                    client = self._clients[lane] = self._make_client()
                yield client
            finally:
                self._free.append(lane)

    async def aclose(self) -> None:
        clients = [c for c in self._clients if c is not None]
        self._clients = [None] * len(self._clients)
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
