"""TRINITY: an evolved LLM coordinator, as a reproducible pipeline.

Nothing happens at import time; see `trinity.cli` for the command line.
"""

__version__ = "0.1.0"
