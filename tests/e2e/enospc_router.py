"""`smp-router` with writes failing as on a full disk, for the full-disk tests.

    SMP_ENOSPC=snapshot python enospc_router.py serve --store memory --data-dir DIR

SMP_ENOSPC names what fails with ENOSPC, comma-separated: `snapshot` (the memory
store's snapshot files), `reserve` (room reserved on disk, `DiskReserve.ensure`).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import store.durability
from router.server.cli.main import main


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def inject(what: set[str]) -> None:
    if "snapshot" in what:
        real_write_synced = store.durability.write_synced

        def write_synced(path: Path, chunks, *, mode: int = 0o666) -> int:
            if ".snapshot" in Path(path).name:
                raise _no_space()
            return real_write_synced(path, chunks, mode=mode)

        store.durability.write_synced = write_synced  # atomic_write looks it up at each call
    if "reserve" in what:
        def ensure(self, size: int) -> None:
            if size > self.size:
                raise _no_space()

        store.durability.DiskReserve.ensure = ensure  # type: ignore[method-assign]


if __name__ == "__main__":
    inject(set(filter(None, os.environ.get("SMP_ENOSPC", "").split(","))))
    sys.exit(main(sys.argv[1:]))
