"""Stage functions behind the Prefect flows and DVC stages (prepare, cache_states, evolve, evaluate)."""
