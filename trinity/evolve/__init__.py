"""Evolution: black-box strategies and on-policy methods with explicit state (one registry,
strategy_registry.py), fitness shaping, checkpoints, Polars tables, plots, learning diagnostics (x0 baseline,
both validation modes, episode shares, the mean's routing matrix).

Import the modules themselves (`trinity.evolve.loop`, `trinity.evolve.strategy_registry`, ...): this package
imports nothing, so checking a strategy's name does not load the loop, and DVC stages that only check
names do not depend on the loop's code.
"""
