"""N workers in one process, in either of two shapes.

- `workers_in_process`: each worker on a port of its own. Tests (and benches) pick
  the worker a client lands on by the port it connects to, and read each worker's
  router; each worker keeps the caps on connections for itself.
- `workers_sharing_a_listener`: the supervisor's shape (supervisor.py), all in this
  process: one listening socket for every worker, and one admission keeping the
  router's caps on connections and its NEW budgets, which each worker asks. A
  client lands on whichever worker accepts first.

The workers are the same as under a supervisor (their `Ownership`, their share of
the data directory, the channel between them: worker_router.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path

import trio

from ..core.ownership import Ownership
from ..edge.listen import naming_address
from ..edge.listener import bind_listening_socket
from ..router import RouterInfo
from ..settings.config import RouterConfig
from .admission import RouterAdmission, serve_router_admission
from .owner_exceptions import with_owner_exceptions
from .worker_router import start_worker_router

_groups = count()


@asynccontextmanager
async def workers_in_process(config: RouterConfig, workers: int = 2
                             ) -> AsyncIterator[list[RouterInfo]]:
    """`workers` routers sharing the queues by ownership, each on a port of its own,
    until the block ends."""
    async with _worker_group(config) as (group, identity_dir, nursery):
        yield [await start_worker_router(nursery, config, _ownership(config, workers, index),
                                         group, identity_dir)
               for index in range(workers)]
        nursery.cancel_scope.cancel()


@dataclass(frozen=True, slots=True)
class SharedListenerWorkers:
    infos: list[RouterInfo]  # each worker's (their `port` the one they share)
    admission: RouterAdmission  # the router's caps, as the supervisor keeps them


@asynccontextmanager
async def workers_sharing_a_listener(config: RouterConfig, workers: int = 2
                                     ) -> AsyncIterator[SharedListenerWorkers]:
    """`workers` routers behind one listening socket on `config.host:config.port`,
    with one admission for them all, until the block ends."""
    config = replace(config, workers=workers)  # the router's caps count every worker
    async with _worker_group(config) as (group, identity_dir, nursery):
        with naming_address("the router", config.host, config.port):
            listening = await bind_listening_socket(config.host, config.port)
        with listening:
            admission = await nursery.start(serve_router_admission, group, config)
            # A descriptor each: two tasks of one Trio loop cannot wait on one descriptor,
            # but can on two of one socket (the kernel wakes both, as it wakes two processes).
            infos = [await start_worker_router(nursery, config, _ownership(config, workers, index),
                                               group, identity_dir, listening.dup())
                     for index in range(workers)]
            yield SharedListenerWorkers(infos, admission)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def _worker_group(config: RouterConfig
                        ) -> AsyncIterator[tuple[str, Path, trio.Nursery]]:
    """The name the workers' links are found by, their one identity and the nursery
    they run in (cancelled by the caller at the end of its block)."""
    group = f"in-process-{os.getpid()}-{next(_groups)}"
    async with shared_identity_dir(config) as identity_dir, trio.open_nursery() as nursery:
        yield group, identity_dir, nursery


def _ownership(config: RouterConfig, workers: int, index: int) -> Ownership:
    return with_owner_exceptions(Ownership(workers, index), config.data_dir)


@asynccontextmanager
async def shared_identity_dir(config: RouterConfig) -> AsyncIterator[Path]:
    """One identity for every worker, also without a data directory: each would make
    its own, and the clients of one address would meet several keys."""
    if config.data_dir is not None:
        yield config.data_dir
        return
    with tempfile.TemporaryDirectory() as scratch:
        yield Path(scratch)
