"""Settings for every test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """A router started without --data-dir uses $XDG_DATA_HOME/smp-router: never the
    real one in a test (subprocesses inherit the variable)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
