"""Errors of the evolution core."""

from __future__ import annotations

from trinity.errors import TrinityError


class BudgetExhausted(TrinityError):
    """A run budget (cost, tokens, calls) is spent.

    An evaluation callback may raise it (or return traces whose end_reason is 'budget'); evolution then
    stops at the last completed generation boundary with everything saved, and resuming later with a
    larger budget continues from there.
    """


class CheckpointError(TrinityError):
    """The checkpoint in a run folder cannot be used (corrupt, or written by a different configuration)."""
