"""Opening the stores the configuration names, through `store.open_stores`.

A store that cannot be opened because of the configuration (an unknown kind,
a data directory holding another kind) is a `ConfigError`, so the command
line reports it as a usage error rather than a crash. A store whose files
cannot be read (a corrupt line in the middle of a log, a damaged snapshot, an
I/O error) is a `StoreOpenError` naming the file, and for a corrupt log line
the option that skips it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import trio

from store import SnapshotError, StoreKindMismatch, open_stores, store_options
from store.factory import store_dir
from store.interfaces import MessageStore, QueueStore, StoreError
from store.journal.storelog import LogCorruptError, StoreLogError
from store.postgres.opener import DatabaseUnavailable, SchemaLocked, SchemaTooNew
from store.sqlite.database import DB_FILE

from .settings.config import ConfigError, RouterConfig

# A router is normally stopped by cancelling it; closing its stores (the last
# group commit, the snapshot of a memory store) must still run to the end.
STORE_CLOSE_TIMEOUT = 60.0


@asynccontextmanager
async def open_router_stores(
    config: RouterConfig,
) -> AsyncIterator[tuple[QueueStore, MessageStore]]:
    stack = AsyncExitStack()
    try:
        try:
            options = store_options(config.store, fsync=config.fsync, **config.store_options)
            stores = await stack.enter_async_context(
                open_stores(config.store, config.data_dir, options)
            )
        except LogCorruptError as e:
            raise StoreOpenError(
                f"{e}; start with --skip-corrupt to leave that line out "
                "(it stays in the log's backup)"
            ) from e
        except (SnapshotError, StoreLogError, StoreError) as e:
            raise StoreOpenError(
                f"cannot open the {config.store} store {_location(config)}: {e}"
            ) from e
        except (DatabaseUnavailable, SchemaLocked, SchemaTooNew) as e:
            raise StoreOpenError(f"cannot open the postgres store: {e}") from e
        except (StoreKindMismatch, ValueError) as e:
            raise ConfigError(str(e)) from e
        yield stores.queues, stores.messages
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(STORE_CLOSE_TIMEOUT):
            await stack.aclose()


def _location(config: RouterConfig) -> str:
    """The file or directory a store failed to open, for the operator's message."""
    if config.data_dir is None:
        return "in memory"
    directory = store_dir(config.data_dir, config.store)
    return str(directory / DB_FILE) if config.store == "sqlite" else f"in {directory}"


class StoreOpenError(Exception):
    """The stores could not be opened from their files; the message says which and why."""
