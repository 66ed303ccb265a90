"""Shared test set-up. Helper modules beside the tests (pool_stub, scripted_pool, serve_support,
coordinator_support, evolve_fixture, process_support) are imported by name: pytest puts this folder on sys.path, so no
test edits sys.path or imports another test module."""

import os

# Prefect's temporary server can be slow to start on a fresh database (ENVIRONMENT.md).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


import pytest


@pytest.fixture(scope="session")
def tiny_backbone_overrides(tmp_path_factory) -> list[str]:
    """Overrides pointing the coordinator at a tiny random Llama saved once per session as a Hugging Face
    folder (coordinator_support.save_tiny_backbone): the wiring tests' backbone."""
    from coordinator_support import save_tiny_backbone

    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


@pytest.fixture(scope="session")
def deployed_flows(tmp_path_factory):
    """One real Prefect server with the project's deployments served (process_support.DeployedFlows), shared
    by the deployment tests of the session."""
    from process_support import DeployedFlows

    flows = DeployedFlows(tmp_path_factory.mktemp("prefect-deployments"))
    try:
        yield flows
    finally:
        flows.close()
