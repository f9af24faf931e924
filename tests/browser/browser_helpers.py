"""What the browser tests know of a running gateway."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Gateway:
    page_url: str  # http(s)://127.0.0.1:PORT/
    smp_url: str  # ws(s)://127.0.0.1:PORT/smp
    address: str  # smp://<keyHash>@127.0.0.1:PORT/smp
    process: subprocess.Popen
