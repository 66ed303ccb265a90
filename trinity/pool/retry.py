"""When a failed HTTP attempt is sent again, and after how long.

The rules are those of the openai-python SDK: connection errors, timeouts, 408, 409, 429 and 5xx are
retried (trinity.pool.errors marks them `retryable`); a server's Retry-After is honoured up to a cap;
otherwise the wait grows exponentially with jitter. The settings are the `pool.retry` schema dataclass
(trinity.config_schema.pool.Retry), which also holds their defaults.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

from trinity.config_schema.pool import Retry


def backoff_delay_s(policy: Retry, retries_done: int, retry_after_s: float | None, rng: random.Random) -> float:
    """Seconds to wait before retry number `retries_done + 1`: the server's Retry-After (capped at
    `retry_after_max_s`) when it sent one, else `backoff_base_s` doubling per retry up to `backoff_max_s`,
    shortened by a random fraction up to `jitter` so that clients refused together do not return together."""
    if retry_after_s is not None:
        return min(max(retry_after_s, 0.0), policy.retry_after_max_s)
    base = min(policy.backoff_max_s, policy.backoff_base_s * 2.0 ** retries_done)
    return base * (1.0 - policy.jitter * rng.random())


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None if absent."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)
