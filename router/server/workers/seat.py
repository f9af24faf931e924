"""What a worker process is given by its supervisor (docs/workers.md): its place
among the workers and the listening socket, through the environment and an
inherited descriptor; and its tie to the supervisor, a pipe on its stdin whose
end means the supervisor is gone, so that no worker outlives it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from ..core.ownership import Ownership
from ..settings.config import StartupError

WORKER_ENV = "SMP_ROUTER_WORKER"  # "INDEX/COUNT/FD", set by the supervisor only
# A router without a data directory: where the supervisor put its one identity, made for
# this run (every worker must answer with the address the supervisor printed).
IDENTITY_ENV = "SMP_ROUTER_IDENTITY_DIR"


@dataclass(frozen=True, slots=True)
class WorkerSeat:
    ownership: Ownership
    listening_fd: int
    identity_dir: Path | None = None  # the run's identity when there is no data directory

    @property
    def index(self) -> int:
        return self.ownership.index

    def environment_value(self) -> str:
        return f"{self.ownership.index}/{self.ownership.workers}/{self.listening_fd}"

    def listening_socket(self) -> socket.socket:
        """The listening socket the supervisor bound, shared by every worker."""
        try:
            sock = socket.socket(fileno=self.listening_fd)
        except OSError as e:
            raise StartupError(f"worker {self.index}: no listening socket at descriptor "
                               f"{self.listening_fd}: {e.strerror or e}") from e
        if sock.type != socket.SOCK_STREAM or sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0:
            sock.detach()
            raise StartupError(f"worker {self.index}: descriptor {self.listening_fd} "
                               "is not a listening TCP socket")
        return sock


def seat_from_environment(environ: Mapping[str, str] = os.environ) -> WorkerSeat | None:
    """The seat the supervisor gave this process; None for a router of its own."""
    value = environ.get(WORKER_ENV)
    if value is None:
        return None
    try:
        index, workers, fd = (int(part) for part in value.split("/"))
        identity_dir = environ.get(IDENTITY_ENV)
        return WorkerSeat(Ownership(workers, index), fd,
                          None if identity_dir is None else Path(identity_dir))
    except ValueError as e:
        raise StartupError(f"{WORKER_ENV}={value!r} is not INDEX/COUNT/FD of a worker") from e


async def stop_when_supervisor_gone(scope: trio.CancelScope) -> None:
    """Cancel `scope` once the supervisor's end of stdin closes (it stopped or died)."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with stdin:
        while await stdin.receive_some():
            pass
    logging.getLogger("smp-router").warning("the supervisor is gone: stopping")
    scope.cancel()


def label_log_records(index: int) -> None:
    """Name the worker in each of its log lines (the log is the supervisor's, shared):
    in the record's logger name, which every handler's format shows, so that a
    handler made again on SIGHUP keeps it."""
    make_record = logging.getLogRecordFactory()

    def labelled(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.name = f"worker-{index} {record.name}"
        return record

    logging.setLogRecordFactory(labelled)
