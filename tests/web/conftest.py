"""Fixtures for the web client's tests (see web_helpers)."""

from __future__ import annotations

import pytest
from web_helpers import find_node


@pytest.fixture(scope="session")
def node() -> str:
    """The `node` executable, version 20 or later, with web/node_modules installed."""
    return find_node()
