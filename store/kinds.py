"""What a store kind is: its two open stores, the typed options it opens with, its opener.

Each kind is a folder (store/memory/, store/journal/, store/sqlite/): its two
stores, and an opener module with its options type (a frozen dataclass deriving
from `StoreOptions`), its opener (an async context manager factory
`opener(store_dir, options) -> Stores` that opens both stores under `store_dir`,
None for a memory-only run, and closes them on exit) and `KIND`, the two
together, which the factory registers.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from .durability import FsyncPolicy
from .interfaces import Message, MessageStore, QueueLinkData, QueueRecord, QueueStore

# (queues, messages, links as (recipient id, link)) inserted in one transaction
BulkImport = Callable[
    [list[QueueRecord], list[tuple[bytes, Message]], list[tuple[bytes, QueueLinkData]]],
    Awaitable[Any],
]


class BulkExport(Protocol):
    """A kind's own fast reads for a migration: pages of queues (each with its link)
    and of messages (queue by queue, each queue's oldest first), the number of
    messages, and the message counts of many queues at once."""

    def queue_pages(self) -> AsyncIterable[list[tuple[QueueRecord, QueueLinkData | None]]]: ...

    def message_pages(self) -> AsyncIterable[list[tuple[bytes, Message]]]: ...

    async def message_count(self) -> int: ...

    async def queue_sizes(self, recipient_ids: Sequence[bytes]) -> list[int]: ...


@dataclass(slots=True)
class Stores:
    """The two open stores of one kind."""

    kind: str
    queues: QueueStore
    messages: MessageStore
    store_dir: Path | None = None
    bulk_import: BulkImport | None = None  # one-transaction insert, if the kind has one
    bulk_export: BulkExport | None = None  # paged read of everything, if the kind has one


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    """What every kind is opened with."""

    fsync: FsyncPolicy = FsyncPolicy.BATCH
    skip_corrupt: bool = False  # a kind with logs starts past a corrupt line (with a warning)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync", FsyncPolicy.parse(self.fsync))


OptionsT = TypeVar("OptionsT", bound=StoreOptions)
StoreOpener = Callable[[Path | None, OptionsT], AbstractAsyncContextManager[Stores]]


@dataclass(frozen=True, slots=True)
class StoreKind(Generic[OptionsT]):
    """A kind's opener and the type of the options it takes."""

    opener: StoreOpener[OptionsT]
    options: type[OptionsT] = StoreOptions  # type: ignore[assignment]
    # Its data is in files under its store directory (not in a database elsewhere):
    # a migration into it writes them unsynced and syncs them all once, at the end.
    in_files: bool = True

    def make_options(self, name: str, **settings: Any) -> OptionsT:
        """The kind's options from settings by name; ValueError for one it does not have."""
        known = {f.name for f in fields(self.options)}
        if unknown := sorted(settings.keys() - known):
            raise ValueError(
                f"the {name} store has no setting {', '.join(unknown)} "
                f"(it has: {', '.join(sorted(known))})"
            )
        return self.options(**settings)


class _Closable(Protocol):
    async def close(self) -> None: ...


P = ParamSpec("P")
StoreT = TypeVar("StoreT", bound=_Closable)


def closing_opener(
    open_store: Callable[P, Awaitable[StoreT]],
) -> Callable[P, AbstractAsyncContextManager[StoreT]]:
    """An async context manager taking `open_store`'s own parameters: the store it
    opens, closed on exit."""

    @asynccontextmanager
    async def opened(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[StoreT]:
        store = await open_store(*args, **kwargs)
        try:
            yield store
        finally:
            await store.close()

    return opened
