"""One process per data directory: an exclusive lock held while a command uses it.

Two routers on one data directory, or a store migration under a running router,
would each write the stores as if alone and lose what the other wrote. So every
command that opens a data directory (`serve`, `init`, `migrate-store`) first takes
an exclusive `flock` on `LOCK_FILE` in it, and refuses to run while another
process holds it.

The lock belongs to the open file, so the kernel drops it when the process ends,
however it ends: a router killed with SIGKILL leaves the file behind but never a
stale lock. The file holds the pid of the process that has the lock, for the
message the next one prints; it is never deleted (a process that deleted it could
race another that is opening it, and both would then think they hold the lock).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .config import ConfigError

LOCK_FILE = "router.lock"


class DataDirInUse(ConfigError):
    """Another process holds the data directory's lock."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        holder = "another process" if pid is None else f"process {pid}"
        super().__init__(f"data directory {data_dir} is in use by {holder}")
        self.data_dir = data_dir
        self.pid = pid


@contextmanager
def lock_data_dir(data_dir: Path, *, create: bool = True) -> Iterator[None]:
    """Hold the directory's lock for the block; DataDirInUse if another process has it.

    `create`: make the directory if it is missing; otherwise a missing directory
    has nothing to protect and the block runs without a lock.
    """
    if create:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    elif not data_dir.is_dir():
        yield
        return
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(data_dir, _holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> int | None:
    """The pid the lock holder wrote, if it has written it yet."""
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
