"""Durability for every store: the fsync policy, group commit, and writing files safely.

`FsyncPolicy` is the one vocabulary of the `--fsync` option, from the
configuration down to each backend. `GroupCommit` lets one commit (an fsync,
or a database transaction) cover every writer that arrived while the previous
one ran. `atomic_write` and `replace_durably` are the only ways a store puts
a whole file in place: the data is fsynced before the rename, and the
directory after it, so a crash leaves either the old file or the new one.

Group commit: every caller of `wait()` has already handed over its change;
one leader runs the owner's `commit` for all callers that arrived within a
short window, or while the previous round was running, and every one of them
returns after that round. The leader's round is shielded from cancellation,
so a cancelled caller never strands the others.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from pathlib import Path

import trio

from router.protocol.types import store_error

from .interfaces import StoreError

# --- the fsync policy -------------------------------------------------------------


class FsyncPolicy(StrEnum):
    """When written data is forced to disk (the `--fsync` option).

    A StrEnum: a policy equals its name, so configuration files and command
    lines carry it as text.
    """

    NEVER = "never"  # written to the OS only: survives kill -9, not a power loss
    BATCH = "batch"  # group commit: one fsync covers every change of a short window
    ALWAYS = "always"  # an fsync before every change returns (concurrent ones may share it)

    @classmethod
    def parse(cls, value: str) -> FsyncPolicy:
        """The policy named `value`; ValueError naming the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(cls)
            raise ValueError(f"fsync must be one of {names}, not {value!r}") from None


# --- files -------------------------------------------------------------------------


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (a regular file may take a short write just before ENOSPC)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def truncate_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, chunks: Iterable[bytes], *, mode: int = 0o666) -> int:
    """Create (or replace) `path` with `chunks` and fsync it; returns its size.

    Only for a file nobody reads until it is renamed into place (or for a new,
    empty file): use `atomic_write` to replace a file others may read. `mode` is
    the new file's permissions (before the umask), so a secret is never readable
    by others, not even for a moment.
    """
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with open(fd, "wb", buffering=1 << 16) as f:
        for chunk in chunks:
            f.write(chunk)
            size += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    return size


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions in `directory` durable; OSError if not."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (and `root`): what was written there
    without syncing is then durable; OSError if not."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(directory))


def replace_durably(source: Path, target: Path) -> None:
    """Rename `source` over `target`, and fsync the directory so the rename survives a crash."""
    os.replace(source, target)
    fsync_dir(target.parent)


def own_temp_suffix() -> str:
    """A temporary file's suffix of this process's own (`atomic_write`): processes
    that write one file at once (the workers of a shared data directory, starting
    together) each write their own, and the last rename wins whole."""
    return f".{os.getpid()}.tmp"


def atomic_write(
    path: Path | str, chunks: Iterable[bytes], *, temp_suffix: str = ".tmp", mode: int = 0o666
) -> int:
    """Replace `path` by `chunks` so that a crash leaves the old file or the whole new one.

    Writes `<path><temp_suffix>`, fsyncs it, renames it over `path` and fsyncs
    the directory; returns the size written. On failure the temporary file is
    removed and `path` is left as it was. A file that several processes may write at
    once takes `temp_suffix=own_temp_suffix()`; one process's file keeps one name,
    which its next write replaces after a crash (a snapshot's is the store's size).
    """
    path = Path(path)
    temp = path.with_name(path.name + temp_suffix)
    try:
        size = write_synced(temp, chunks, mode=mode)
        replace_durably(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return size


def io_error(exc: OSError, what: str) -> StoreError:
    """The one translation of an OSError into what the router answers."""
    reason = exc.strerror or type(exc).__name__
    return StoreError(store_error(reason), f"{what}: {exc}")


# --- group commit ---------------------------------------------------------------


class _Round:
    __slots__ = ("done", "error", "hurry")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None
        # No window to wait: a caller arrived while another round was running (so
        # the round has already collected for a while), or asked for it.
        self.hurry = False


class GroupCommit:
    """One `commit()` call covers every `wait()` that arrived before it started.

    `commit` must make durable everything its owner was handed before the call
    (capturing that set before its first await). Its exception, if any, is
    raised in every caller of that round.
    """

    def __init__(self, commit: Callable[[], Awaitable[None]], window: float = 0.0) -> None:
        self._commit = commit
        self._window = window
        self._collecting = _Round()
        self._running: trio.Event | None = None  # set when the running round ends

    @property
    def busy(self) -> bool:
        """A round is running."""
        return self._running is not None

    async def wait(self, *, hurry: bool = False) -> None:
        """Return once a round that started after this call has ended.

        `hurry` starts that round without waiting for the window (for close).
        """
        mine = self._collecting
        if hurry or self._running is not None:
            mine.hurry = True
        while not mine.done.is_set():
            if self._running is None:
                await self._lead()
            else:
                await self._running.wait()
        if mine.error is not None:
            raise mine.error

    async def _lead(self) -> None:
        finished = self._running = trio.Event()
        try:
            with trio.CancelScope(shield=True):
                mine = self._collecting
                if self._window > 0 and not mine.hurry:
                    await trio.sleep(self._window)  # let concurrent writers join this round
                self._collecting = _Round()
                try:
                    await self._commit()
                except Exception as exc:  # handed to every caller of this round
                    mine.error = exc
                mine.done.set()
        finally:
            self._running = None
            finished.set()


# --- room kept on disk -------------------------------------------------------------


class DiskReserve:
    """Room kept on disk in a file of its own, for a write that must not fail later for
    lack of space (a snapshot at stop; the deletes and checkpoint of a full database).

    The file's blocks are allocated (`posix_fallocate`), so the space is really
    taken from the filesystem, not promised; `release()` gives it back by
    emptying the file, which stays (its presence can mean something to its
    owner), `remove()` deletes it.
    """

    CHUNK = 1 << 20  # the file grows by at least this much at a time

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size if path.exists() else 0

    def ensure(self, size: int) -> None:
        """At least `size` bytes allocated; OSError (ENOSPC) if the disk has not got them."""
        if size <= self.size:
            return
        size = max(size, self.size + self.CHUNK)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        self.size = size

    def release(self) -> None:
        """Give the room back, keeping the (empty) file."""
        if self.path.exists():
            os.truncate(self.path, 0)
        self.size = 0

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.size = 0
