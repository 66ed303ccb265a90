"""Shared test set-up. The tests are in two folders: tests/unit/ (no test marked slow or integration: `make
test-fast`) and tests/integration/ (every test marked slow or integration); the collection guard below fails the
run when a test is in the wrong one. Helper modules beside this file (pool_stub, scripted_pool, serve_support,
coordinator_support, evolve_fixture, process_support, ...) are imported by name from both folders: pyproject's
`pythonpath = ["tests"]` puts this folder on sys.path, so no test edits sys.path, and a helper both a unit and an
integration test need lives in such a module, not in a test module."""

import os

# Before any test module imports torch or numpy: importing trinity pins their numerics (trinity.pin_numerics) as in
# every trinity command, and the libraries read those switches only when they load.
import trinity  # noqa: F401

# Prefect's temporary server can be slow to start on a fresh database (ENVIRONMENT.md).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# No DVC usage reports from the repositories the tests make (each would start a daemon per `dvc` command).
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


from pathlib import Path

import pytest

# Test files that share one pytest-xdist worker: they use the session's one Prefect server (`deployed_flows`).
SHARED_PREFECT_SERVER = ("tests/integration/test_deployments.py", "tests/integration/test_retrain_deployment.py")

# The folders of tests/ that hold test files; what is marked slow or integration goes in the second.
TESTS = Path(__file__).resolve().parent
UNIT, INTEGRATION = "unit", "integration"
MARKS = ("slow", "integration")


def misplaced(items) -> list[str]:
    """The tests in the wrong folder, each with why: under tests/unit/ one marked slow or integration, under
    tests/integration/ one marked neither, anywhere else in tests/ any test."""
    wrong = []
    for item in items:
        try:
            folder = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:      # not under tests/ (a path given on the command line)
            continue
        marks = [m for m in MARKS if item.get_closest_marker(m)]
        if folder == UNIT and marks:
            wrong.append(f"{item.nodeid}: marked {' and '.join(marks)}, so it belongs under tests/{INTEGRATION}/")
        elif folder == INTEGRATION and not marks:
            wrong.append(f"{item.nodeid}: marked neither slow nor integration, so it belongs under tests/{UNIT}/ "
                         "(or mark it)")
        elif folder not in (UNIT, INTEGRATION):
            wrong.append(f"{item.nodeid}: tests go under tests/{UNIT}/ or tests/{INTEGRATION}/")
    return wrong


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test file with a test in the wrong folder (`misplaced`) fails to collect, naming the test and where it
    belongs; as a collection error the run stops before any test, under pytest-xdist too, whatever `-m` says."""
    report = yield
    if report.passed and isinstance(collector, (pytest.Module, pytest.Class)):
        wrong = misplaced([node for node in report.result if isinstance(node, pytest.Item)])
        if wrong:
            report.outcome, report.result = "failed", []
            report.longrepr = (f"{len(wrong)} test(s) in the wrong folder: tests/{UNIT}/ holds the tests marked "
                               f"neither slow nor integration, tests/{INTEGRATION}/ those marked slow or "
                               "integration\n  " + "\n  ".join(wrong))
    return report


# Seconds per test file from one measured run (benchmarks/test_times.py --durations-out writes it;
# `make test-durations`).
DURATIONS = TESTS / "durations.json"


def file_seconds() -> dict[str, float]:
    """The measured seconds of each test file, the files of SHARED_PREFECT_SERVER each counted as their sum (they
    run as one unit); {} without the table."""
    import json

    try:
        seconds = dict(json.loads(DURATIONS.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    shared = sum(float(seconds.get(path, 0.0)) for path in SHARED_PREFECT_SERVER)
    return {**{path: float(s) for path, s in seconds.items()}, **{path: shared for path in SHARED_PREFECT_SERVER}}


def pytest_collection_modifyitems(config, items):
    """Longest files first: under pytest-xdist (`--dist loadfile`, the scheduler below keeps this order) each
    worker takes the next file as it finishes one, so starting the longest ones first keeps a worker from ending
    with one of them running alone. The length is the file's measured seconds (DURATIONS); a file the table
    lacks (a new one) goes after the measured ones: those with tests marked slow (real local models) first, then
    integration (real processes), then the rest. The order within a file is kept (the sort is stable)."""
    seconds = file_seconds()
    rank: dict = {}
    for item in items:
        mark = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("integration") else 2
        rank[item.path] = min(rank.get(item.path, 2), mark)
    root = config.rootpath

    def key(item):
        try:
            measured = seconds.get(item.path.relative_to(root).as_posix(), 0.0)
        except ValueError:
            measured = 0.0
        return (-measured, rank[item.path])

    items.sort(key=key)


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `--dist loadfile`: a file's tests on one worker, so its module fixtures are built once;
    here the files of SHARED_PREFECT_SERVER count as one file, so one worker starts that server, and files start in
    the collection's order (longest first) rather than xdist's by number of tests. (pytest-xdist's
    own `xdist_group` marks do nothing under pytest 9: xdist 3.8 renames nodes through an attribute pytest 9
    no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist orders the files by their number of tests unless told not to, which would start a long file of one
    # test last; keep the collection's order (pytest_collection_modifyitems: longest first)
    config.option.loadscopereorder = False

    class SharedServerFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_PREFECT_SERVER[0] if path in SHARED_PREFECT_SERVER else path

    return SharedServerFileScheduling(config, log)


@pytest.fixture(scope="session")
def tiny_backbone_overrides(tmp_path_factory) -> list[str]:
    """Overrides pointing the coordinator at a tiny random Llama saved once per session as a Hugging Face
    folder (coordinator_support.save_tiny_backbone): the wiring tests' backbone."""
    from coordinator_support import save_tiny_backbone

    return save_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


# The session's one DeployedFlows (`deployed_flows`) while it runs: stopped as soon as the last test of
# SHARED_PREFECT_SERVER ends (`pytest_runtest_teardown`), not at the session's end, since an idle server polled
# by its runner costs about 2 CPU-seconds a minute while the worker goes on with other files.
_DEPLOYMENTS = pytest.StashKey[object]()


def _shared_server_file(config, item) -> bool:
    try:
        return item.path.relative_to(config.rootpath).as_posix() in SHARED_PREFECT_SERVER
    except ValueError:
        return False


@pytest.fixture
def deployed_flows(request, tmp_path_factory):
    """One real Prefect server with the project's deployments served (process_support.DeployedFlows), shared
    by the deployment tests of the session (under pytest-xdist: of the worker; their files are in
    SHARED_PREFECT_SERVER, so one worker runs them all, one after another, and starts it once)."""
    path = request.node.path.relative_to(request.config.rootpath).as_posix()
    assert path in SHARED_PREFECT_SERVER, f"{path} uses deployed_flows: add it to conftest.SHARED_PREFECT_SERVER"
    flows = request.config.stash.get(_DEPLOYMENTS, None)
    if flows is None:
        from process_support import DeployedFlows

        flows = request.config.stash[_DEPLOYMENTS] = DeployedFlows(tmp_path_factory.mktemp("prefect-deployments"))
    return flows


def _stop_deployments(config) -> None:
    flows = config.stash.get(_DEPLOYMENTS, None)
    if flows is not None:
        del config.stash[_DEPLOYMENTS]
        flows.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's own teardown: stop the shared deployments once the next test is in no file of
    SHARED_PREFECT_SERVER (or there is none); a later one would start them again."""
    try:
        return (yield)
    finally:
        if nextitem is None or not _shared_server_file(item.config, nextitem):
            _stop_deployments(item.config)


def pytest_sessionfinish(session):
    _stop_deployments(session.config)
