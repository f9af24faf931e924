"""The reconnecting client agent: the layer an application uses to receive.

    async with open_agent() as agent:
        agent.add_queues("smp://<keyHash>@host:port", queues)
        async for event in agent.events():
            if isinstance(event, ReceivedMessage):
                handle(event.message)
                await agent.ack(event)

Theory of operation
-------------------
The agent keeps the set of queues the application wants subscribed in a
`SubscriptionTable` (agent_state.py, where the PENDING / ACTIVE state machine
is described). Queues are served per session key (router address, group):
by default one connection per router; a `group` gives a set of queues a
connection of its own.

Each key has one worker task in the agent's nursery. The worker connects,
starts a new session in the table, and runs two tasks on the connection:

- the *subscriber* sends the key's unsent queues with `subscribe_many`, at
  most `batch_size` per call, and applies the answers: OK -> ACTIVE (one
  `QueuesUp` per batch), a temporary error -> sent again after a delay, any
  other error -> removed (`QueuesRemoved`, REFUSED). Queues added later wake
  it up.
- the *reader* turns the connection's events into agent events: MSG ->
  `ReceivedMessage`, END / DELD -> the queue leaves the set (`QueuesRemoved`).
  Everything is checked against the session it came from: the table ignores
  what belongs to a session it has replaced.

When the connection ends the worker reports the active queues DOWN (once
each), waits `Backoff.delay(n)` and connects again; the new session sends SUB
for everything that was pending or active. A lost connection also fails an
`ack` in flight, and the router delivers that message again to the next
session, which is why `ack` of a message from a replaced session is not sent
(it returns False) and `events()` drops such messages still waiting to be read.

Events go to the application through an unbounded channel, and the reader
never waits for the application. That is bounded in practice: the router
delivers one unacknowledged message per queue, so at most one message per
queue and session (and one UP/DOWN per batch) can wait. A bounded channel
would make a slow application stall the reader until the router dropped the
connection as a stalled writer.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import trio

from router.protocol.ids_hash import queue_ids_hash
from router.protocol.types import AUTH, NO_MSG, ErrorType

from ._address import KEY_HASH_SIZE, has_key_hash, parse_address
from ._client import SMPClient, open_client
from ._errors import BadResponse, ConnectionClosed, SMPClientError, SMPError
from ._types import (
    DeletedEvent,
    EndEvent,
    Event,
    MessageEvent,
    RecipientQueue,
    UndecryptedMessageEvent,
)
from .agent_state import (
    AgentEvent,
    Connected,
    ConnectFailed,
    ConnectionLost,
    QueuesDown,
    QueuesRemoved,
    QueueState,
    QueuesUp,
    ReceivedMessage,
    RemovalReason,
    SessionKey,
    SubscriptionTable,
)
from .backoff import Backoff

Connect = Callable[[str], AbstractAsyncContextManager[SMPClient]]

DEFAULT_BATCH_SIZE = 1000
DEFAULT_BACKOFF = Backoff()
# Events taken from the connection in one go, so END/DELD bursts become one event.
EVENT_DRAIN = 256


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    sessions: int  # session keys (connections wanted)
    connected: int  # of those, with an open connection
    pending: int  # queues waiting for SUB to be answered OK
    active: int  # queues subscribed
    connects: int  # connections made, reconnections included
    connect_failures: int
    messages: int  # messages handed to the application
    stale_dropped: int  # messages and events of replaced sessions dropped
    # sessions of a certificate service whose SUBS figures differed from the router's,
    # repaired by SUBs (docs/protocol.md#service-subscriptions)
    service_drift: int = 0


@asynccontextmanager
async def open_agent(
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    batch_size: int = DEFAULT_BATCH_SIZE,
    ping_interval: float | None = 30.0,
    ping_timeout: float = 15.0,
    connect: Connect | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[Agent]:
    """Run an agent for the duration of the block; its connections close on exit.

    `backoff` sets the delays between connection attempts; `batch_size` the
    most SUBs sent in one `subscribe_many`; `ping_interval` how often each
    connection is checked with PING (None: never) and `ping_timeout` how long
    the PONG may take before the connection counts as lost. `connect` opens a
    client for an address (default `open_client`; pass e.g.
    ``functools.partial(open_client, ssl_context=ctx)`` for TLS); `rng` draws
    the jitter.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    try:
        async with trio.open_nursery() as nursery:
            agent = Agent(
                nursery, backoff, batch_size, ping_interval, ping_timeout,
                connect or open_client, rng or random.Random(),
            )
            try:
                yield agent
            finally:
                await agent._close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The workers never raise, so the group only wraps the exception of the
        # caller's block: hand that back as it was.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class Agent:
    """Keeps the application's queues subscribed across drops; see the module doc."""

    def __init__(
        self,
        nursery: trio.Nursery,
        backoff: Backoff,
        batch_size: int,
        ping_interval: float | None,
        ping_timeout: float,
        connect: Connect,
        rng: random.Random,
    ) -> None:
        self._nursery = nursery
        self._backoff = backoff
        self._batch_size = batch_size
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._connect = connect
        self._rng = rng
        self._table = SubscriptionTable()
        self._workers: dict[SessionKey, _Worker] = {}
        self._send, self._receive = trio.open_memory_channel[AgentEvent](math.inf)
        self._connects = self._connect_failures = self._messages = self._stale = 0
        self._service_drift = 0
        self._closing = False

    # --- what the application wants ----------------------------------------------------

    def add_queues(
        self, router: str, queues: Iterable[RecipientQueue], group: str | None = None
    ) -> int:
        """Want `queues` subscribed on `router` (an ``smp://`` address); returns how many
        were new. They are subscribed in the background; each is reported UP once done.

        `group` puts the queues on a connection of their own for that group.
        Raises ValueError for a bad address or a queue held under another group.
        """
        self._check_address(router)  # fail here, not in the background
        key = (router, group)
        added = self._table.add(key, queues)
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _Worker(self, key)
            self._nursery.start_soon(worker.run)
        elif added:
            worker.wake()
        return len(added)

    def _check_address(self, router: str) -> None:
        """A plain ``ws(s)://`` URL without a key hash is fine when the caller's
        own `connect` supplies the key hash (e.g. ``partial(open_client, key_hash=...)``);
        the default `open_client` needs it in the address."""
        if self._connect is open_client or has_key_hash(router):
            parse_address(router)
        else:
            parse_address(router, bytes(KEY_HASH_SIZE))

    def remove_queue(self, router: str, recipient_id: bytes) -> bool:
        """Stop wanting the queue; True if it was wanted. Its messages are no longer
        reported (an unacknowledged one stays on the router for a later subscriber)."""
        key = self._table.key_of(recipient_id)
        if key is None or key[0] != router:
            return False
        self._table.remove(recipient_id)
        return True

    def state(self, recipient_id: bytes) -> QueueState | None:
        """PENDING, ACTIVE, or None when the queue is not in the agent's set."""
        return self._table.state(recipient_id)

    # --- what the router says -------------------------------------------------------------

    async def next_event(self) -> AgentEvent:
        """The next event; messages of replaced sessions are skipped (module doc).

        Raises `trio.EndOfChannel` once the agent has closed.
        """
        while True:
            event = await self._receive.receive()
            if self._current(event):
                return event

    def events(self) -> AsyncIterator[AgentEvent]:
        """`async for` over `next_event()`, until the agent closes."""
        return _EventIterator(self)

    async def ack(self, message: ReceivedMessage) -> bool:
        """ACK the message on the session it came from; True if the router took it.

        False when that session has been replaced or its connection breaks
        (the router will deliver the message again), or when the router no
        longer holds it (NO_MSG, or AUTH once the queue is gone).
        """
        worker = self._workers.get((message.router, message.group))
        client = worker.client_for(message.session) if worker is not None else None
        if client is None or not self._table.holds(worker.key, message.session,
                                                   message.recipient_id):
            return False
        try:
            await client.ack(message.queue, message.msg_id)
        except ConnectionClosed:
            return False
        except SMPError as e:
            if e.error in (NO_MSG, AUTH):
                return False
            raise
        return True

    def statistics(self) -> AgentStatistics:
        pending, active = self._table.counts()
        return AgentStatistics(
            sessions=len(self._workers),
            connected=sum(w.client is not None for w in self._workers.values()),
            pending=pending,
            active=active,
            connects=self._connects,
            connect_failures=self._connect_failures,
            messages=self._messages,
            stale_dropped=self._stale,
            service_drift=self._service_drift,
        )

    # --- used by the workers ------------------------------------------------------------

    def _emit(self, event: AgentEvent) -> None:
        try:
            self._send.send_nowait(event)
        except trio.ClosedResourceError:
            pass  # the agent is closing; nobody will read it

    def _current(self, event: AgentEvent) -> bool:
        if type(event) is not ReceivedMessage:
            return True
        key = (event.router, event.group)
        if self._table.holds(key, event.session, event.recipient_id):
            self._messages += 1
            return True
        self._stale += 1
        return False

    async def _close(self) -> None:
        """Close every connection politely while its tasks still run, then stop."""
        self._closing = True
        self._send.close()
        async with trio.open_nursery() as nursery:
            for worker in self._workers.values():
                if worker.client is not None:
                    nursery.start_soon(worker.client.aclose)


class _EventIterator:
    __slots__ = ("_agent",)

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def __aiter__(self) -> _EventIterator:
        return self

    async def __anext__(self) -> AgentEvent:
        try:
            return await self._agent.next_event()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None


class _Worker:
    """Connects, serves and reconnects one session key (module doc)."""

    def __init__(self, agent: Agent, key: SessionKey) -> None:
        self.agent = agent
        self.key = key
        self.router, self.group = key
        self.client: SMPClient | None = None
        self.session = 0
        self._wake = trio.Event()

    def wake(self) -> None:
        self._wake.set()

    def client_for(self, session: int) -> SMPClient | None:
        return self.client if session and session == self.session else None

    async def run(self) -> None:
        # After a session ends, or after the n-th failed attempt in a row, wait
        # delay(n) (n = 0 after a session): clients that lost the same router
        # together come back spread out, and a router that stays away is asked
        # less and less often.
        failures = 0
        while True:
            served, error = await self._attempt()
            reason = str(error)
            if self.agent._closing:
                return
            if served:
                failures = 0
            delay = self.agent._backoff.delay(failures, self.agent._rng)
            failures += 1
            if not served:
                self.agent._connect_failures += 1
                self.agent._emit(ConnectFailed(
                    self.router, self.group, failures, reason, delay,
                    error if isinstance(error, SMPClientError) else None,
                ))
            await trio.sleep(delay)

    async def _attempt(self) -> tuple[bool, str | SMPClientError]:
        """Connect and serve one session: (whether a session ran, why it ended or failed).

        Every client error is retried: a refused upgrade (a proxy's 502 while the
        router restarts) as well as a wrong identity (`IdentityMismatch`, which
        `ConnectFailed.error` lets the application tell apart)."""
        served = False
        try:
            async with self.agent._connect(self.router) as client:
                served = True
                return True, await self._serve(client)
        except SMPClientError as e:
            return served, e

    async def _serve(self, client: SMPClient) -> str:
        table = self.agent._table
        session = table.start_session(self.key)
        self.client, self.session = client, session
        self.agent._connects += 1
        self.agent._emit(Connected(self.router, self.group, session))
        reason = "connection closed"
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._subscriber, client, session, nursery)
                if self.agent._ping_interval is not None:
                    nursery.start_soon(self._pinger, client)
                reason = await self._reader(client, session)
                nursery.cancel_scope.cancel()
        finally:
            self.client, self.session = None, 0
            down = table.lose_session(self.key, session)
            if down:
                self.agent._emit(QueuesDown(self.router, self.group, down))
            self.agent._emit(ConnectionLost(self.router, self.group, session, reason))
        return reason

    # --- subscriber -------------------------------------------------------------------------

    async def _subscriber(self, client: SMPClient, session: int, nursery: trio.Nursery) -> None:
        table, agent = self.agent._table, self.agent
        if client.certificate_service:
            try:
                await self._subscribe_service(client, session, nursery)
            except ConnectionClosed:
                return
            except BadResponse:
                await client.aclose()
                return
        while True:
            batch = table.take_batch(self.key, session, agent._batch_size)
            if not batch:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            try:
                errors = await client.subscribe_many(batch)
            except ConnectionClosed:
                return  # the reader sees it too and ends the session
            except BadResponse:
                await client.aclose()  # a router we cannot understand: start over
                return
            self._apply(session, batch, errors, nursery)

    async def _subscribe_service(
        self, client: SMPClient, session: int, nursery: trio.Nursery
    ) -> None:
        """A client acting for a service by its certificate subscribes the session's
        queues with one SUBS and its own count and ids hash
        (docs/protocol.md#service-subscriptions). The same figures from the router:
        every queue is up, its messages come with the router's walk. Others (drift: a
        queue not associated with the service, or one the router has that the agent
        has not): every queue goes the SUB way, which associates each with the service
        again, so the next session's figures agree."""
        table = self.agent._table
        batch = table.take_batch(self.key, session, math.inf)  # type: ignore[arg-type]
        if not batch:
            return
        for queue in batch:
            client.add_queue(queue)  # the walk's messages are decrypted with its keys
        own = (len(batch), queue_ids_hash(q.recipient_id for q in batch))
        await client.subscribe_service(*own)
        if client.service_figures == own:
            self._apply(session, batch, [None] * len(batch), nursery)
            return
        self.agent._service_drift += 1
        if table.resend(self.key, session, [q.recipient_id for q in batch]):
            self.wake()

    def _apply(
        self,
        session: int,
        batch: Sequence[RecipientQueue],
        errors: Sequence[ErrorType | None],
        nursery: trio.Nursery,
    ) -> None:
        answers = [(q.recipient_id, e) for q, e in zip(batch, errors, strict=True)]
        results = self.agent._table.subscribed(self.key, session, answers)
        if results.up:
            self.agent._emit(QueuesUp(self.router, self.group, results.up))
        refused: dict[ErrorType, list[bytes]] = {}
        for rid, error in results.refused:
            refused.setdefault(error, []).append(rid)
        for error, rids in refused.items():
            self.agent._emit(QueuesRemoved(
                self.router, self.group, tuple(rids), RemovalReason.REFUSED, error
            ))
        if results.retry:
            nursery.start_soon(self._resend_later, session, results.retry)

    async def _resend_later(self, session: int, recipient_ids: tuple[bytes, ...]) -> None:
        await trio.sleep(self.agent._backoff.delay(0, self.agent._rng))
        if self.agent._table.resend(self.key, session, recipient_ids):
            self.wake()

    # --- reader ---------------------------------------------------------------------------

    async def _reader(self, client: SMPClient, session: int) -> str:
        """Route the connection's events until it ends; returns why it did."""
        while True:
            try:
                first = await client.next_event()
                events = [first]
                while len(events) < EVENT_DRAIN:
                    more = client.next_event_nowait()
                    if more is None:
                        break
                    events.append(more)
            except ConnectionClosed as e:
                return e.reason
            self._route(session, events)

    def _route(self, session: int, events: list[Event]) -> None:
        table, agent = self.agent._table, self.agent
        removed: dict[RemovalReason, list[bytes]] = {}
        for event in events:
            kind = type(event)
            if kind is MessageEvent or kind is UndecryptedMessageEvent:
                self._message(session, event)  # type: ignore[arg-type]
            elif kind is EndEvent or kind is DeletedEvent:
                rid = event.recipient_id  # type: ignore[union-attr]
                if table.ended(self.key, session, rid):
                    reason = RemovalReason.ENDED if kind is EndEvent else RemovalReason.DELETED
                    removed.setdefault(reason, []).append(rid)
                else:
                    agent._stale += 1
            # Notifier and service events belong to other users of the client.
        for reason, rids in removed.items():
            agent._emit(QueuesRemoved(self.router, self.group, tuple(rids), reason))

    def _message(self, session: int, event: MessageEvent | UndecryptedMessageEvent) -> None:
        table = self.agent._table
        queue = table.queue(event.recipient_id)
        if queue is None or not table.holds(self.key, session, event.recipient_id):
            self.agent._stale += 1
            return
        self.agent._emit(ReceivedMessage(self.router, self.group, session, queue, event))

    # --- liveness -------------------------------------------------------------------------

    async def _pinger(self, client: SMPClient) -> None:
        """A connection that stops answering (a silent network drop) is closed."""
        interval, timeout = self.agent._ping_interval, self.agent._ping_timeout
        assert interval is not None
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(timeout) as scope:
                try:
                    await client.ping()
                except SMPClientError:
                    return  # the connection ended: the reader reports it
            if scope.cancelled_caught:
                await client.aclose()  # the reader then ends the session
                return
