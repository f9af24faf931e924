"""Settings for every test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from postgres_server import stop_shared_server
from worker_count import WORKERS_VARIABLE, test_workers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--workers", type=int, default=None, metavar="N",
                     help="run the routers the suites start as N worker processes behind "
                          f"one address (docs/testing.md); also ${WORKERS_VARIABLE}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_process(reason): a test of one process only, deselected with --workers 2")
    workers = config.getoption("workers")
    if workers is not None:
        if workers < 1:
            raise pytest.UsageError(f"--workers must be 1 or more, not {workers}")
        os.environ[WORKERS_VARIABLE] = str(workers)  # also for the routers tests spawn


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if test_workers() == 1:
        return
    kept = [item for item in items if item.get_closest_marker("one_process") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(
            items=[item for item in items if item.get_closest_marker("one_process")])
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def _stop_postgres() -> Iterator[None]:
    """The PostgreSQL that tests start on first use (tests/postgres_server.py) stops with
    the run."""
    yield
    stop_shared_server()


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """A router started without --data-dir uses $XDG_DATA_HOME/smp-router: never the
    real one in a test (subprocesses inherit the variable)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
