"""What a store kind is: its two open stores, the typed options it opens with, its opener.

Each kind has its own options type (a frozen dataclass deriving from
`StoreOptions`) and an opener in its own module (store/memory/opener.py,
store/journal/opener.py, store/sqlite/opener.py): an async context manager
factory `opener(store_dir, options) -> Stores` that opens both stores under
`store_dir` (None for a memory-only run) and closes them on exit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from .durability import FsyncPolicy
from .interfaces import Message, MessageStore, QueueRecord, QueueStore

BulkImport = Callable[[list[QueueRecord], list[tuple[bytes, Message]]], Awaitable[Any]]


@dataclass(slots=True)
class Stores:
    """The two open stores of one kind."""

    kind: str
    queues: QueueStore
    messages: MessageStore
    store_dir: Path | None = None
    bulk_import: BulkImport | None = None  # one-transaction insert, if the kind has one


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    """What every kind is opened with."""

    fsync: FsyncPolicy = FsyncPolicy.BATCH
    skip_corrupt: bool = False  # a kind with logs starts past a corrupt line (with a warning)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync", FsyncPolicy.parse(self.fsync))


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalOptions(StoreOptions):
    """The journal kind: the store log for queues, the journal for messages."""

    backups: int = 5  # compacted store logs kept
    window: float = 0.002  # seconds a group commit waits for more writers (batch only)
    rotate_after: int = 10_000  # messages per message file
    max_open_files: int = 512  # message files held open at once
    compact_state_at: int = 64 << 20  # state log bytes past which it is compacted while running


DEFAULT_DELETED_TTL = 24 * 3600  # seconds a soft-deleted queue row is kept
DEFAULT_CACHE_SIZE = 16_384  # queue records kept in memory (about 0.6 KB each)


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteOptions(StoreOptions):
    """The sqlite kind: both stores in one database."""

    deleted_ttl: int = DEFAULT_DELETED_TTL
    cache_size: int = DEFAULT_CACHE_SIZE


OptionsT = TypeVar("OptionsT", bound=StoreOptions)
StoreOpener = Callable[[Path | None, OptionsT], AbstractAsyncContextManager[Stores]]


@dataclass(frozen=True, slots=True)
class StoreKind(Generic[OptionsT]):
    """A kind's opener and the type of the options it takes."""

    opener: StoreOpener[OptionsT]
    options: type[OptionsT] = StoreOptions  # type: ignore[assignment]

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
