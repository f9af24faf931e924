"""Settings for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres_server import stop_shared_server


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
