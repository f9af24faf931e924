"""N workers in one process, each on a port of its own: tests (and benches) pick the
worker a client lands on by the port it connects to, and read each worker's router.

The workers are the same as under a supervisor (their `Ownership`, their share of
the data directory, the channel between them); only the listener differs: a socket
each instead of one shared.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from itertools import count
from pathlib import Path

import trio

from ..core.ownership import Ownership
from ..router import RouterInfo, serve_router
from ..settings.config import RouterConfig
from .handoff import Handoff
from .layout import worker_config
from .owner_exceptions import with_owner_exceptions

_groups = count()


@asynccontextmanager
async def workers_in_process(config: RouterConfig, workers: int = 2
                             ) -> AsyncIterator[list[RouterInfo]]:
    """`workers` routers sharing the queues by ownership, until the block ends."""
    group = f"in-process-{os.getpid()}-{next(_groups)}"
    async with shared_identity_dir(config) as identity_dir, trio.open_nursery() as nursery:
        infos: list[RouterInfo] = []
        for index in range(workers):
            ownership = with_owner_exceptions(Ownership(workers, index), config.data_dir)
            handoff = Handoff(ownership, group)
            await nursery.start(handoff.run)
            infos.append(await nursery.start(partial(
                serve_router, worker_config(config, ownership), ownership=ownership,
                identity_dir=identity_dir, prepare=handoff.install,
            )))
        yield infos
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def shared_identity_dir(config: RouterConfig) -> AsyncIterator[Path]:
    """One identity for every worker, also without a data directory: each would make
    its own, and the clients of one address would meet several keys."""
    if config.data_dir is not None:
        yield config.data_dir
        return
    with tempfile.TemporaryDirectory() as scratch:
        yield Path(scratch)
