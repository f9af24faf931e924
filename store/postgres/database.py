"""The PostgreSQL database the queue and message stores share: its connection pool,
its schema, and the lock that keeps a second router off it.

Theory of operation
-------------------
psycopg's connections are blocking (its async API runs only on asyncio's event
loop, not on Trio's), so every use of the database goes through
`trio.to_thread.run_sync` with a `CapacityLimiter` as large as the pool: each
worker call borrows one connection from a `psycopg_pool.ConnectionPool`, runs
its statements (a transaction when there are several) and returns the
connection. A write returns only after PostgreSQL committed it; with
`--fsync never` commits are asynchronous (`synchronous_commit = off`: a crash of
the database may lose the last commits, a crash of the router loses nothing).

The database restarted or unreachable: the failing call raises `StoreError`
(`ERR STORE database unavailable`), the pool throws the broken connection away,
and later calls get new connections once the database answers again (the pool
retries for `RECONNECT_WINDOW`, then on the next call: see there). Nothing is
answered OK unless its transaction committed.

One router per schema: the database holds a session advisory lock keyed by the
schema's name on a connection of its own for the router's life. A second
router on the same schema fails to take it and refuses to start. If that
connection is lost (the database restarted), the lock is taken again as soon
as the database answers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
import trio
from psycopg import errors as pg_errors
from psycopg import sql

from router.protocol.types import INTERNAL, store_error

from ..durability import FsyncPolicy
from ..interfaces import StoreError
from .schema import MIGRATIONS, MIGRATIONS_TABLE, SCHEMA_VERSION

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SCHEMA = "smp_server"  # as the reference router's
DEFAULT_POOL_SIZE = 10
CONNECT_TIMEOUT = 10.0  # seconds to reach the database when opening
POOL_TIMEOUT = 10.0  # seconds a call waits for a connection before ERR STORE
# The pool retries a lost connection with doubling pauses (1, 2, 4 ... s) for this long,
# then gives up until the next call, which tries at once: the pauses stay short, so the
# router serves within seconds of the database's return even after a long outage (with
# psycopg_pool's own 5 minutes, a pause reached a minute or two, ERR STORE all along).
RECONNECT_WINDOW = 10.0
UNAVAILABLE = store_error("database unavailable")
NO_SPACE = store_error("database or disk is full")
LOCK_WAIT = 3.0  # seconds a start waits for the schema's lock before refusing
LOCK_RETRY = 0.1
LOCK_CLASS = 0x534D5052  # "SMPR": the advisory lock's first key; the schema's hash the second
# Workers of one router (docs/workers.md#stores) share the schema: worker I holds the lock
# LOCK_CLASS + I, so a router of one process (worker 0's key) or another router's worker 0
# is still refused, and the workers' migrations wait for one another on MIGRATION_LOCK_CLASS.
MIGRATION_LOCK_CLASS = LOCK_CLASS - 1
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class DatabaseUnavailable(Exception):
    """The database could not be reached or used when the store opened."""


class SchemaTooNew(Exception):
    """The database's schema was written by a newer router."""


class SchemaLocked(Exception):
    """Another router holds this schema."""


def translate_error(exc: BaseException) -> BaseException:
    """Map a failure of the database layer to StoreError; leave bugs as they are."""
    if isinstance(exc, pg_errors.DiskFull | pg_errors.OutOfMemory):
        return StoreError(NO_SPACE, str(exc).strip())
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return StoreError(UNAVAILABLE, str(exc).strip())
    if isinstance(exc, psycopg.IntegrityError | psycopg.ProgrammingError):
        return StoreError(INTERNAL, str(exc).strip())
    if isinstance(exc, psycopg.Error):
        return StoreError(store_error(type(exc).__name__), str(exc).strip())
    return exc


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


class PostgresDatabase:
    """One schema of one PostgreSQL database, through a pool of `pool_size` connections."""

    def __init__(
        self, url: str, *, schema: str = DEFAULT_SCHEMA, pool_size: int = DEFAULT_POOL_SIZE,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH, lock_index: int = 0,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(
                f"db_schema must be a lower-case SQL name (letters, digits, _), not {schema!r}"
            )
        if pool_size < 1:
            raise ValueError(f"db_pool_size must be at least 1, not {pool_size}")
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"db_connection must be a postgresql:// URL, not {redacted(url)!r}")
        self.url = url
        self.schema = schema
        self.lock_index = lock_index
        self.pool_size = pool_size
        self.fsync = FsyncPolicy.parse(fsync)
        self._limiter = trio.CapacityLimiter(pool_size)
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._lock_conn: psycopg.Connection | None = None
        self.calls = 0  # worker calls made, for statistics and tests
        self.reconnects_given_up = 0  # the pool's RECONNECT_WINDOWs that ended unconnected

    @property
    def where(self) -> str:
        return f"{redacted(self.url)} schema {self.schema}"

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        try:
            await trio.to_thread.run_sync(self._open)
        except BaseException:
            await trio.to_thread.run_sync(self._close_all)
            raise

    def _open(self) -> None:
        self._lock_conn = self._connect_for_lock()
        self._take_lock(self._lock_conn, wait=LOCK_WAIT)
        with self._lock_conn.transaction():
            self._migrate(self._lock_conn)
        options = f"-c search_path={self.schema}"
        if self.fsync is FsyncPolicy.NEVER:
            options += " -c synchronous_commit=off"
        self._pool = psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            kwargs={"autocommit": True, "options": options, "connect_timeout": CONNECT_TIMEOUT},
            timeout=POOL_TIMEOUT,
            reconnect_timeout=RECONNECT_WINDOW,
            reconnect_failed=self._reconnect_failed,
            check=psycopg_pool.ConnectionPool.check_connection,
            open=True,
            name=f"smp-{self.schema}",
        )

    def _reconnect_failed(self, pool: psycopg_pool.ConnectionPool) -> None:
        self.reconnects_given_up += 1
        log.warning("%s: still unreachable after %.0f s of retries; the next call tries "
                    "again", self.where, RECONNECT_WINDOW)

    def _connect_for_lock(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        except psycopg.Error as e:
            raise DatabaseUnavailable(
                f"cannot reach the database {redacted(self.url)}: {_first_line(e)}"
            ) from e

    def _take_lock(self, conn: psycopg.Connection, wait: float = 0.0) -> None:
        """Take the schema's lock, trying for `wait` seconds: a router killed a moment ago
        holds it until PostgreSQL notices its connection is gone."""
        deadline = time.monotonic() + wait
        while True:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                (LOCK_CLASS + self.lock_index, self.schema),
            ).fetchone()
            if (row and row[0]) or time.monotonic() >= deadline:
                break
            time.sleep(LOCK_RETRY)
        if not (row and row[0]):
            raise SchemaLocked(
                f"another router uses schema {self.schema} of {redacted(self.url)} "
                "(it holds the schema's lock); stop it first"
            )

    def _migrate(self, conn: psycopg.Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                     (MIGRATION_LOCK_CLASS, self.schema))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute(MIGRATIONS_TABLE)
        row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"schema {self.schema} of {redacted(self.url)} is at version {version}, newer "
                f"than this router's {SCHEMA_VERSION}: run a newer router"
            )
        for to_version in range(version + 1, SCHEMA_VERSION + 1):
            name, script = MIGRATIONS[to_version]
            conn.execute(script)
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (to_version, name)
            )
            log.info("%s: schema migrated to version %d (%s)", self.where, to_version, name)

    async def keep_lock(self, interval: float = 5.0) -> None:
        """Run for the router's life: take the schema's lock again after losing its
        connection (the database restarted)."""
        while True:
            await trio.sleep(interval)
            await trio.to_thread.run_sync(self._check_lock, abandon_on_cancel=True)

    def _check_lock(self) -> None:
        if self._pool is None:
            return  # closed (or closing): the lock goes with the store
        conn = self._lock_conn
        if conn is not None and not conn.closed:
            try:
                conn.execute("SELECT 1")
                return
            except psycopg.Error:
                conn.close()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        except psycopg.Error:
            return  # the database is still away: try again later
        try:
            self._take_lock(conn)
        except (psycopg.Error, SchemaLocked) as e:
            conn.close()
            log.error("%s: the schema's lock could not be taken again: %s", self.where, e)
            return
        if self._pool is None:  # closed meanwhile
            conn.close()
            return
        self._lock_conn = conn
        log.warning("%s: the schema's lock was taken again", self.where)

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._close_all)

    def _close_all(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            conn.close()

    @property
    def closed(self) -> bool:
        return self._pool is None

    # --- calls ---------------------------------------------------------------

    async def run(self, op: Callable[[psycopg.Connection], T], *, transaction: bool = False) -> T:
        """Run `op` on a pooled connection on a worker thread (inside one transaction if
        asked); a failure of the database becomes StoreError."""
        pool = self._pool
        if pool is None:
            raise StoreError(INTERNAL, f"{self.where} is closed")
        self.calls += 1

        def call() -> T:
            with pool.connection() as conn:
                if not transaction:
                    return op(conn)
                with conn.transaction():
                    return op(conn)

        try:
            return await trio.to_thread.run_sync(call, limiter=self._limiter)
        except StoreError:
            raise
        except Exception as exc:
            error = translate_error(exc)
            if error is exc:
                raise
            raise error from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def fetch_all(conn: psycopg.Connection, query: str, params: Any = None) -> list[Any]:
    return conn.execute(query, params).fetchall()


def fetch_one(conn: psycopg.Connection, query: str, params: Any = None) -> Any:
    return conn.execute(query, params).fetchone()
