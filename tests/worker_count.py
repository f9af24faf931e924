"""The count of worker processes the suites run their router with (docs/testing.md).

`pytest --workers 2 tests/e2e` (or `SMP_TEST_WORKERS=2`) runs the router a test
starts as two workers sharing the queues by ownership (docs/workers.md), in the
test's own process (`workers/in_process.py`), behind one address: a test's
clients connect to one port and land on the workers in turn, so a sender and
its recipient are usually on different workers and their commands go through
the hand-off. What the test reads of "the router" is a `WorkerRouters`: its
statistics summed over the workers, a client's connection found in whichever
worker it landed on, everything else (its stores, its configuration) the first
worker's.

With `shared_listener` (the edge suite's) the workers take the supervisor's shape
instead: one listening socket and one admission for all (`in_process.py`
`workers_sharing_a_listener`), so the caps on connections are the router's, and
its listener is a `RouterListener`.

Tests of one process only (figures of the whole router read from one `Router`,
descriptors of one process) are marked `one_process` with their reason and
deselected at two workers.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import fields, replace
from functools import partial
from typing import Any

import trio

from router.server import Router, RouterConfig, RouterInfo, open_router, serve_router
from router.server.core.connection import Connection
from router.server.core.counters import RouterStatistics
from router.server.core.ownership import Ownership
from router.server.edge.listener import EdgeListener
from router.server.ops.statslog import StatsLog
from router.server.workers.admission import RouterAdmission
from router.server.workers.handoff import Handoff
from router.server.workers.in_process import (
    shared_identity_dir,
    workers_in_process,
    workers_sharing_a_listener,
)
from router.server.workers.layout import worker_config
from router.server.workers.operations import stats_answer
from router.server.workers.stats import run_stats_log

WORKERS_VARIABLE = "SMP_TEST_WORKERS"
_groups = itertools.count()


def one_process(args: Sequence[str]) -> list[str]:
    """A command line with `--workers 1` after its `serve` unless it names a count: the
    default `auto` is the test machine's cores (docs/workers.md#the-default), and a
    router a test spawns must behave the same on 2 cores and on 16."""
    args = list(args)
    named = any(arg == "--workers" or arg.startswith("--workers=") for arg in args)
    if "serve" in args and not named:
        at = args.index("serve") + 1
        args[at:at] = ["--workers", "1"]
    return args


def test_workers() -> int:
    """The count of workers of this run (1 unless `--workers` or SMP_TEST_WORKERS say)."""
    return int(os.environ.get(WORKERS_VARIABLE, "1"))


test_workers.__test__ = False  # type: ignore[attr-defined]  # not a test, a reader


async def serve_router_under_test(
    config: RouterConfig, *, shared_listener: bool = False,
    task_status: trio.TaskStatus[RouterInfo] = trio.TASK_STATUS_IGNORED
) -> None:
    """`serve_router(config)`, or with several workers, the workers behind one port:
    a forwarder's, or with `shared_listener` one listening socket and one admission
    as under the supervisor (the caps on connections the router's)."""
    workers = test_workers()
    if workers == 1:
        await serve_router(config, task_status=task_status)
        return
    if shared_listener:
        await _serve_sharing_a_listener(config, workers, task_status=task_status)
        return
    # the workers on ports of their own, the one address on the configured port
    async with workers_in_process(replace(config, port=0), workers) as infos:
        await _serve_one_address(config.host, config.port, infos, task_status=task_status)


async def _serve_sharing_a_listener(
    config: RouterConfig, workers: int, *, task_status: trio.TaskStatus[RouterInfo]
) -> None:
    async with workers_sharing_a_listener(config, workers) as shared, \
            trio.open_nursery() as nursery:
        listeners = [info.listener for info in shared.infos if info.listener is not None]
        await _report_one_router(nursery, shared.infos, shared.infos[0].port,
                                 RouterListener(listeners, shared.admission), task_status)
        await trio.sleep_forever()


async def _serve_one_address(
    host: str, port: int, infos: list[RouterInfo], *,
    task_status: trio.TaskStatus[RouterInfo]
) -> None:
    """A port whose connections go to each worker's own port in turn, byte for byte:
    in one process the workers cannot share one listening socket as under the
    supervisor (one Trio task at a time may wait on a socket)."""
    turns = itertools.cycle(infos)

    async def forward(client: trio.SocketStream) -> None:
        worker = next(turns)
        try:
            upstream = await trio.open_tcp_stream(worker.host, worker.port)
        except OSError:
            await client.aclose()
            return
        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, upstream, nursery.cancel_scope)
            nursery.start_soon(_pump, upstream, client, nursery.cancel_scope)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, forward, port, host=host))
        port = listeners[0].socket.getsockname()[1]
        await _report_one_router(nursery, infos, port, None, task_status)
        await trio.sleep_forever()


async def _report_one_router(
    nursery: trio.Nursery, infos: list[RouterInfo], port: int,
    listener: RouterListener | None, task_status: trio.TaskStatus[RouterInfo],
) -> None:
    """The workers reported as one router on `port`, with its stats log if configured."""
    routers = WorkerRouters([info.router for info in infos])
    config = infos[0].router.config
    if config.stats_log is not None:  # the one log, as the supervisor writes it
        figures = await nursery.start(run_stats_log, config.stats_log,
                                      config.stats_interval, len(infos), routers.ask_all)
        routers.stats_log = figures.stats_log
    task_status.started(replace(infos[0], port=port, listener=listener,  # type: ignore[arg-type]
                                router=routers))


async def _pump(source: trio.SocketStream, sink: trio.SocketStream,
                both: trio.CancelScope) -> None:
    """Copy until one side ends, then end both (a router's close reaches its client)."""
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        both.cancel()


class WorkerRouters:
    """The routers of several workers in one process, as tests use one `Router`: each
    `serve_transport` (a client) goes to the next worker in turn; the statistics
    are the sums of the workers' (a client's shadows not counted as connections);
    a session's connection is found in its worker; suspending and resuming reach
    every worker, blocking a queue its owner; everything else is the first
    worker's."""

    def __init__(self, routers: list[Router]) -> None:
        self.routers = routers
        self._turns = itertools.cycle(routers)
        self.stats_log: StatsLog | None = None  # the supervisor's one log, if configured

    async def ask_all(self, request: str) -> list[bytes | None]:
        """Each worker's answer to an operations request (workers/operations.py)."""
        assert request == "stats"
        return [stats_answer(router) for router in self.routers]

    async def serve_transport(self, *args: object, **kwargs: object) -> None:
        await next(self._turns).serve_transport(*args, **kwargs)

    def connection_for_session(self, session_id: bytes) -> Connection | None:
        """The client's own connection (in the worker it landed on), not a shadow."""
        for router in self.routers:
            for conn in router.connections.values():
                if conn.session_id == session_id and not _is_shadow(conn):
                    return conn
        return None

    def suspend(self) -> None:
        for router in self.routers:
            router.suspend()

    def resume(self) -> None:
        for router in self.routers:
            router.resume()

    async def block_queue(self, recipient_id: bytes, reason: str) -> bool:
        return await self._owner(recipient_id).block_queue(recipient_id, reason)

    def unblock_queue(self, recipient_id: bytes) -> bool:
        return self._owner(recipient_id).unblock_queue(recipient_id)

    def _owner(self, entity_id: bytes) -> Router:
        return self.routers[self.routers[0].ownership.owner_of(entity_id)]

    @property
    def subscriptions(self) -> _SubscriptionsSummed:
        return _SubscriptionsSummed([router.subscriptions for router in self.routers])

    def statistics(self) -> RouterStatistics:
        each = [router.statistics() for router in self.routers]
        # Each worker's figures leave its shadows out already (Router.statistics).
        summed = {f.name: sum(getattr(s, f.name) for s in each) for f in fields(RouterStatistics)}
        return RouterStatistics(**summed)

    def __getattr__(self, name: str) -> object:
        return getattr(self.routers[0], name)


class RouterListener:
    """The workers' listeners on their one socket as the router's one listener, what
    the edge tests read of it: the counts the router's caps are checked on (its
    admission's: `admission`, `pending`, `max_connections`), the connections the
    workers hold and refused summed, suspending and resuming every worker."""

    def __init__(self, listeners: list[EdgeListener], admission: RouterAdmission) -> None:
        self.listeners = listeners
        self.admission = admission
        self.limits = listeners[0].limits
        self.port = listeners[0].port

    @property
    def open_connections(self) -> int:
        """A connection counts from its accept in a worker until the admission has
        heard of its end (a worker tells it after closing)."""
        held = sum(listener.open_connections for listener in self.listeners)
        return max(held, self.admission.open)

    @property
    def pending(self) -> int:
        return self.admission.pending

    @property
    def refused(self) -> int:
        return sum(listener.refused for listener in self.listeners)

    @property
    def max_connections(self) -> int:
        return self.admission.limits.max_connections

    async def wait_connections_at_most(self, count: int) -> None:
        # polled: the admission has no event for a close, and tests wait seconds at most
        while self.open_connections > count:
            await trio.sleep(0.01)

    @property
    def suspended(self) -> bool:
        return all(listener.suspended for listener in self.listeners)

    def suspend(self) -> None:
        for listener in self.listeners:
            listener.suspend()

    def resume(self) -> None:
        for listener in self.listeners:
            listener.resume()


class _SubscriptionsSummed:
    """The counts of every worker's subscriptions (each holds its own queues'): its
    length and each of its counting methods (`service_subs_count()`, ...) summed."""

    def __init__(self, each: list[Any]) -> None:
        self._each = each

    def __len__(self) -> int:
        return sum(len(subscriptions) for subscriptions in self._each)

    @property
    def events(self) -> _EndsFlushed:
        return _EndsFlushed([subscriptions.events for subscriptions in self._each])

    def __getattr__(self, name: str) -> Callable[[], int]:
        return lambda: sum(getattr(subscriptions, name)() for subscriptions in self._each)


class _EndsFlushed:
    """Every worker's gathering of END / DELD: `flush()` sends what each holds."""

    def __init__(self, each: list[Any]) -> None:
        self._each = each

    def flush(self) -> None:
        for events in self._each:
            events.flush()


def _is_shadow(conn: Connection) -> bool:
    return getattr(conn.transport, "shadow", False)


@asynccontextmanager
async def open_router_under_test(config: RouterConfig) -> AsyncIterator[Router]:
    """`open_router(config)` (no listener), or with several workers their routers,
    joined by their channel as under the supervisor."""
    workers = test_workers()
    if workers == 1:
        async with open_router(config) as router:
            yield router
        return
    group = f"test-{os.getpid()}-{next(_groups)}"
    async with shared_identity_dir(config) as identity_dir, trio.open_nursery() as nursery:
        async with AsyncExitStack() as stack:
            routers: list[Router] = []
            for index in range(workers):
                ownership = Ownership(workers, index)
                handoff = Handoff(ownership, group)
                await nursery.start(handoff.run)
                router = await stack.enter_async_context(open_router(
                    worker_config(config, ownership), ownership, identity_dir=identity_dir))
                handoff.install(router)
                routers.append(router)
            yield WorkerRouters(routers)  # type: ignore[misc]
        nursery.cancel_scope.cancel()
