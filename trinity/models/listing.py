"""The registry's versions as a text table for a terminal (`trinity models list`): one row per version,
oldest first, the champion marked with `*`, with the validation and test rewards it was registered with."""

from __future__ import annotations

from trinity.models.store import Version


def versions_table(versions: list[Version], champion: str | None) -> list[str]:
    """The header and one line per version; a reward the version did not record shows as `-`."""
    lines = [f"{'':2s}{'version':8s} {'created':26s} {'validation':>10s} {'test':>7s}  source"]
    for v in versions:
        m = v.meta.get("metrics") or {}
        mark = "* " if v.name == champion else "  "
        lines.append(f"{mark}{v.name:8s} {str(v.meta.get('created', '')):26s} "
                     f"{_reward(m.get('validation_reward')):>10s} {_reward(m.get('test_reward')):>7s}  "
                     f"{v.meta.get('source_run', '')}")
    return lines


def _reward(value) -> str:
    return "-" if value is None else f"{float(value):.4f}"
