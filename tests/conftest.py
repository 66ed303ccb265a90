"""Shared test set-up. Helper modules beside the tests (pool_stub, scripted_pool, serve_support,
coordinator_support, evolve_fixture, process_support) are imported by name: pytest puts this folder on sys.path, so no
test edits sys.path or imports another test module."""

import os

# Prefect's temporary server can be slow to start on a fresh database (ENVIRONMENT.md).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
