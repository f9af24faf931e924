"""Opening the stores the configuration names.

The `store` package's `open_stores(kind, data_dir, ...)` knows every backend;
without it only the memory stores are available.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import store
from store.interfaces import MessageStore, QueueStore
from store.memory import MemoryMessageStore, MemoryQueueStore

from .config import ConfigError, RouterConfig


@asynccontextmanager
async def open_router_stores(
    config: RouterConfig,
) -> AsyncIterator[tuple[QueueStore, MessageStore]]:
    opener = getattr(store, "open_stores", None)
    if opener is not None:
        async with opener(config.store, config.data_dir, **config.store_options) as stores:
            yield _pair(stores)
        return
    if config.store != "memory":
        raise ConfigError(f"the {config.store} store is not available")
    queues, messages = MemoryQueueStore(), MemoryMessageStore()
    try:
        yield queues, messages
    finally:
        await messages.close()
        await queues.close()


def _pair(stores: object) -> tuple[QueueStore, MessageStore]:
    """Accept either a (queue store, message store) pair or an object holding both."""
    if isinstance(stores, tuple):
        return stores  # type: ignore[return-value]
    return stores.queues, stores.messages  # type: ignore[attr-defined]
