"""State that belongs to one asyncio event loop (connections, futures), kept per loop.

One pool client may serve several threads, each with its own loop, and successive `asyncio.run` calls:
objects bound to a loop cannot be used from another, so each loop gets its own, made on first use there.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        """The running loop's value, made now if this loop has none yet."""
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            value = self._values[loop] = self._make()
        return value

    def pop(self) -> T | None:
        """Take the running loop's value away (None if it had none), and forget those of closed loops,
        which can no longer be awaited: their sockets die with them."""
        value = self._values.pop(asyncio.get_running_loop(), None)
        for loop in [loop for loop in list(self._values) if loop.is_closed()]:
            self._values.pop(loop, None)
        return value
