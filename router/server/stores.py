"""Opening the stores the configuration names, through `store.open_stores`.

A store that cannot be opened because of the configuration (an unknown kind,
a data directory holding another kind) is a `ConfigError`, so the command
line reports it as a usage error rather than a crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from store import StoreKindMismatch, open_stores
from store.interfaces import MessageStore, QueueStore

from .config import ConfigError, RouterConfig


@asynccontextmanager
async def open_router_stores(
    config: RouterConfig,
) -> AsyncIterator[tuple[QueueStore, MessageStore]]:
    async with AsyncExitStack() as stack:
        try:
            stores = await stack.enter_async_context(
                open_stores(config.store, config.data_dir, **config.store_options)
            )
        except (StoreKindMismatch, ValueError) as e:
            raise ConfigError(str(e)) from e
        yield stores.queues, stores.messages
