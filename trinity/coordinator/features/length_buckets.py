"""Group prompts of different lengths into padded batches without wasting much arithmetic on padding.

A padded batch costs `rows x widest row` token slots. On a CPU the forward is arithmetic-bound, so every
padding slot costs as much as a real token, and a batch of 16 first-turn prompts of real suites (135 to
560 tokens) wastes about a quarter of its work (measured on the prepared suites of `make run`). On a GPU a
forward of a small backbone costs about the same at any width, so there fewer, fuller batches win.

`length_batches` walks the prompts shortest first and closes a batch when it holds `max_batch` rows or
when adding the next row would push the padding above `max_padding` x the batch's real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from trinity.config_schema.coordinator import parse_max_padding

# max_padding for `auto`, per device type: a CPU pays for padding, a GPU barely does.
AUTO_MAX_PADDING = {"cpu": 0.1, "cuda": None, "mps": None}


def resolve_max_padding(value: object, device_type: str) -> float | None:
    """`auto` -> the device's default; None/`none` -> no bound; else a fraction >= 0."""
    parsed = parse_max_padding(value)
    return AUTO_MAX_PADDING.get(device_type) if parsed == "auto" else parsed  # type: ignore[return-value]


def length_batches(lengths: Sequence[int], max_batch: int, max_padding: float | None = None) -> list[list[int]]:
    """Indices into `lengths`, grouped into batches (shortest first); every index appears exactly once."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in order:
        n = int(lengths[i])
        if current:
            # sorted ascending, so the new row is the widest: slots = rows x n
            full = len(current) >= max_batch
            wasteful = max_padding is not None and (len(current) + 1) * n > (1.0 + max_padding) * (real + n)
            if full or wasteful:
                batches.append(current)
                current, real = [], 0
        current.append(i)
        real += n
    if current:
        batches.append(current)
    return batches
