"""Fixtures of the tests against upstream's browser client (see upstream_helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from upstream_helpers import build_upstream_client


@pytest.fixture(scope="session")
def upstream_client() -> Path:
    """The directory of upstream's built client (smp-web)."""
    return build_upstream_client()
