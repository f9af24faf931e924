"""The size of the large router tests per store kind (tests/router/conftest.py)."""

from __future__ import annotations

import os

DURABLE_SHARE = 4  # the durable stores run the large tests at 1/4 of their size
FULL_SCALE = os.environ.get("SMP_SCALE_FULL", "") not in ("", "0")


def scaled(store_kind: str, size: int) -> int:
    """`size` on the memory store (or with SMP_SCALE_FULL=1), a quarter of it otherwise."""
    return size if FULL_SCALE or store_kind == "memory" else size // DURABLE_SHARE
