"""Shared test set-up. Helper modules beside the tests (pool_stub, scripted_pool, serve_support,
coordinator_support, evolve_fixture, process_support) are imported by name: pytest puts this folder on sys.path, so no
test edits sys.path or imports another test module."""

import os

# Prefect's temporary server can be slow to start on a fresh database (ENVIRONMENT.md).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


import pytest


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Scheduling for `make test` (pytest-xdist, --dist loadgroup): the tests marked slow (real services,
    the longest ones) run first, so the workers do not end with one of them running alone; and a file's tests
    share one worker (its module fixtures are built once) unless a test names its own `xdist_group`
    (the deployment tests share the session's Prefect server that way). Without xdist only the order changes."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)   # stable: file order kept otherwise
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def tiny_backbone_overrides(tmp_path_factory) -> list[str]:
    """Overrides pointing the coordinator at a tiny random Llama saved once per session as a Hugging Face
    folder (coordinator_support.save_tiny_backbone): the wiring tests' backbone."""
    from coordinator_support import save_tiny_backbone

    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


@pytest.fixture(scope="session")
def deployed_flows(tmp_path_factory):
    """One real Prefect server with the project's deployments served (process_support.DeployedFlows), shared
    by the deployment tests of the session (under pytest-xdist: of the worker; the tests that use it are in
    one `xdist_group`, so one worker starts it)."""
    from process_support import DeployedFlows

    flows = DeployedFlows(tmp_path_factory.mktemp("prefect-deployments"))
    try:
        yield flows
    finally:
        flows.close()
