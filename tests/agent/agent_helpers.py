"""Test helpers: a router that restarts on the same port and data, queues with
their sender keys, and a log of agent events that tests wait on."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

import store
from router.client import ConnectionClosed, RecipientQueue, SMPError, open_client
from router.client.agent import Agent
from router.client.agent_state import (
    AgentEvent,
    QueuesDown,
    QueuesRemoved,
    QueuesUp,
    ReceivedMessage,
)
from router.protocol import crypto
from router.server import RouterConfig, RouterInfo, serve_router

# Durable kinds this tree has, best first; the memory store keeps its data in
# snapshots written on a clean stop, which is what a restart in a test is.
DURABLE_KINDS = [k for k in ("journal", "sqlite") if k in store.STORE_KINDS]
RESTART_KINDS = [*DURABLE_KINDS, "memory"]
HEAVY_KIND = RESTART_KINDS[0]


class Progress:
    """Something changed: waiters re-check their condition (no sleeping in tests)."""

    def __init__(self) -> None:
        self._changed = trio.Event()

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()


class RestartableRouter:
    """A router in the test's nursery, stopped and started again on the same port."""

    def __init__(self, nursery: trio.Nursery, data_dir: Path, kind: str, **options: object):
        self._nursery = nursery
        self._data_dir = data_dir
        self._kind = kind
        self._options = options
        self.port = 0
        self.info: RouterInfo | None = None
        self.up = trio.Event()
        self.progress = Progress()
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()

    @property
    def address(self) -> str:
        assert self.info is not None
        return self.info.address

    async def start(self) -> RouterInfo:
        config = RouterConfig(
            port=self.port, store=self._kind, data_dir=self._data_dir, **self._options
        )
        self.info = await self._nursery.start(self._serve, config)
        self.port = self.info.port
        self.up.set()
        self.progress.notify()
        return self.info

    async def _serve(self, config: RouterConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._done = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                await serve_router(config, task_status=task_status)
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Stop cleanly (the stores are closed and saved) and wait until it is down."""
        self.up = trio.Event()
        assert self._scope is not None
        self._scope.cancel()
        await self._done.wait()
        self.progress.notify()

    async def restart(self) -> RouterInfo:
        await self.stop()
        return await self.start()


@asynccontextmanager
async def restartable_router(
    data_dir: Path, kind: str = "memory", **options: object
) -> AsyncIterator[RestartableRouter]:
    async with trio.open_nursery() as nursery:
        router = RestartableRouter(nursery, data_dir, kind, **options)
        await router.start()
        yield router
        nursery.cancel_scope.cancel()


@dataclass(frozen=True, slots=True)
class SecuredQueue:
    queue: RecipientQueue
    sender_seed: bytes

    @property
    def rid(self) -> bytes:
        return self.queue.recipient_id


async def create_queues(address: str, n: int, *, parallel: int = 64) -> list[SecuredQueue]:
    """`n` queues secured with fresh sender keys, created over one connection."""
    made: list[SecuredQueue] = []

    async def make(count: int, client) -> None:
        for _ in range(count):
            q = await client.create_queue()
            seed, key = crypto.new_ed25519()
            await client.secure_queue(q, key)
            made.append(SecuredQueue(q, seed))

    async with open_client(address) as client, trio.open_nursery() as nursery:
        for i in range(parallel):
            share = n // parallel + (1 if i < n % parallel else 0)
            if share:
                nursery.start_soon(make, share, client)
    return made


async def send_to(address: str, queue: SecuredQueue, *bodies: bytes) -> None:
    async with open_client(address) as client:
        for body in bodies:
            await client.send(queue.queue.sender_id, body, sender_seed=queue.sender_seed)


class EventLog:
    """Every event an agent reported, and per-queue UP / DOWN / removal histories."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.history: dict[bytes, list[str]] = defaultdict(list)
        self.messages: list[ReceivedMessage] = []
        self.progress = Progress()

    def add(self, event: AgentEvent) -> None:
        self.events.append(event)
        if isinstance(event, QueuesUp):
            for rid in event.recipient_ids:
                self.history[rid].append("UP")
        elif isinstance(event, QueuesDown):
            for rid in event.recipient_ids:
                self.history[rid].append("DOWN")
        elif isinstance(event, QueuesRemoved):
            for rid in event.recipient_ids:
                self.history[rid].append(f"REMOVED:{event.reason.value}")
        elif isinstance(event, ReceivedMessage):
            self.messages.append(event)
        self.progress.notify()

    def count(self, rid: bytes, what: str) -> int:
        return Counter(self.history[rid])[what]

    def up_count(self, rids) -> int:
        """How many of `rids` have reported UP more often than DOWN (are up now)."""
        return sum(self.count(r, "UP") > self.count(r, "DOWN") for r in rids)

    async def wait_all_up(self, rids, times: int = 1) -> None:
        rids = list(rids)
        await self.progress.wait_until(
            lambda: all(self.count(r, "UP") >= times for r in rids)
        )

    async def pump(self, agent: Agent, ack: bool = False) -> None:
        """Read the agent's events into the log (acknowledging messages if asked)."""
        async for event in agent.events():
            self.add(event)
            if ack and isinstance(event, ReceivedMessage):
                await agent.ack(event)


async def keep_sending(
    router: RestartableRouter,
    queues: list[SecuredQueue],
    count: int,
    tag: str,
    ok: set[bytes],
    attempted: set[bytes],
    progress: Progress | None = None,
) -> None:
    """Send `count` distinct bodies round-robin over `queues`, across router restarts.

    A body answered OK goes into `ok`; every body tried goes into `attempted`
    (one whose connection broke may or may not have been stored).
    """
    i = 0
    while i < count:
        await router.up.wait()
        try:
            async with open_client(router.address) as client:
                while i < count:
                    q = queues[i % len(queues)]
                    body = f"{tag}-{i}".encode()
                    attempted.add(body)
                    try:
                        await client.send(q.queue.sender_id, body, sender_seed=q.sender_seed)
                    except SMPError:
                        pass  # QUOTA while the recipient is away: not answered OK
                    else:
                        ok.add(body)
                        if progress is not None:
                            progress.notify()
                    i += 1
        except ConnectionClosed:
            i += 1  # that body's fate is unknown; it stays in `attempted` only
