"""One client connection: its I/O and the tasks serving it.

Theory of operation (DESIGN.md, STYLE.md principle 7). An idle connection is
one task, the receive loop (the task that called `run`), waiting for a block.
Nothing sits between the task that makes a transmission and the socket:

- receive: reads a block, has the dispatcher verify and execute it, and writes
  the answers itself (`push`), packed into as few blocks as fit, in one write
  where the transport can;
- writing: one task at a time writes (`_writing`). A task that has something
  to send while another is mid-write (blocked on a peer that reads slowly)
  appends it to the pending list and goes on; the writing task sends whatever
  is pending, packed, before it returns. The pending list holds at most
  `send_queue_size` batches: a producer that finds it full waits for room
  (the back-pressure a fast sender gets, since its receive loop then reads
  nothing); a peer that does not take a write within the configured deadline
  is dropped (the transport's `send_blocks`);
- pushes made in another task without waiting (`push_nowait`: a MSG from the
  SEND of another client, END/DELD/NMSG from the router's event tasks) are
  appended to the pending list, and the connection's delivery task writes
  them;
- delivery: the one task that does this client's waiting work: the pending
  list when nobody is writing, END/DELD events that found the pending list
  full, the queues in its `deliveries` map (subscriptions.py) and the
  catch-up walk of a service subscription (`services.py`), which starts once
  the SUBS answer has been written or is pending (`ClientHandler.answered`),
  so `SOKS` precedes its messages. It is started on demand (`wake_delivery`)
  and ends as soon as it has nothing to do, so an idle connection has none.

A delivered message therefore costs three task steps: the sender's receive
loop reads the SEND and leaves the MSG in the recipient's pending list, the
recipient's delivery task writes it, and the recipient's receive loop reads
the ACK (and answers it in the same step).

What the client is subscribed to is not kept here: a connection only does
I/O. `run` is given a `ClientHandler` (the router's, shared by every
connection) and the client's own state, which it hands back to the handler
untouched: no object is made per connection to join the two.

In per-queue-task mode each subscribed queue also has a task of its own in
the connection's nursery. When the receive loop or the delivery task ends for
any reason, the nursery is cancelled and the router's cleanup runs in
`finally`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio

from router.protocol.block import BatchPacker
from router.protocol.handshake import service_id

from ..edge.block_stream import BlockStream, TransportClosed
from ..edge.handshake import Handshake
from .tasks import count_tasks

log = logging.getLogger(__name__)

Client = TypeVar("Client")


class ClientHandler(Protocol[Client]):
    """What serves a connection's client; `client` is the state it keeps for it."""

    def process_block(self, client: Client, block: bytes) -> Awaitable[list[bytes]]:
        """The answers to one block."""
        ...

    def delivery_loop(self, client: Client) -> Awaitable[None]:
        """The client's delivery work; returns once there is none left."""
        ...

    def answered(self, client: Client) -> None:
        """A block's answers are written or pending."""
        ...


class Connection:
    __slots__ = (
        "id", "transport", "version", "session_id", "router_dh_private", "client_key", "service",
        "service_id", "overflow_events", "closed", "close_reason", "last_activity",
        "nursery", "_closed_event", "_receiving", "_delivering", "_handler", "_client",
        "_pending", "_pending_batches", "_max_pending", "_writing", "_room",
        "__weakref__",  # per-connection limits are kept weakly (limits.py)
    )

    def __init__(
        self, conn_id: int, transport: BlockStream, handshake: Handshake, send_queue_size: int
    ) -> None:
        self.id = conn_id
        self.transport = transport
        self.version = handshake.version
        self.session_id = handshake.session_id
        # X25519 authenticators are checked with it (docs/protocol.md#x25519-authenticator).
        self.router_dh_private = handshake.router_dh_private
        self.client_key = handshake.client_key  # with it, RFWD's box key (forwarded.py)
        # proven in the client hello (docs/protocol.md#service-extension)
        self.service = handshake.service
        self.service_id = None if self.service is None else service_id(self.service.service_key)
        self.overflow_events: list[bytes] = []  # END/DELD/ENDS waiting for pending room
        self.closed = False
        self.close_reason = ""
        self.last_activity = 0.0  # trio time the client last sent a block (set by run())
        self.nursery: trio.Nursery | None = None
        # Made only when someone waits: most connections never do.
        self._closed_event: trio.Event | None = None
        self._room: trio.Event | None = None  # set when the pending list is written
        self._receiving = False  # the receive loop runs (in the task that called run())
        self._delivering = False  # the delivery task runs
        self._handler: ClientHandler[Any] | None = None
        self._client: object = None
        self._pending: list[bytes] = []  # transmissions waiting for the writing task
        self._pending_batches = 0
        self._max_pending = send_queue_size
        self._writing = False  # a task is in `_write`

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.transport.remote} v{self.version}>"

    # --- writing ----------------------------------------------------------------

    def outbox_full(self) -> bool:
        """Whether a batch pushed now would have to wait for room."""
        return self._pending_batches >= self._max_pending

    def push_nowait(self, transmissions: list[bytes]) -> None:
        """Leave a batch to be written without waiting (by whoever is writing, else
        by the delivery task); `trio.WouldBlock` if the pending list is full.

        A closed connection swallows the batch: its client will never read it.
        """
        if self.closed:
            return
        if self._pending_batches >= self._max_pending:
            raise trio.WouldBlock
        self.leave(transmissions)

    def leave(self, transmissions: list[bytes]) -> None:
        """Leave a batch to the writing task, or else to the delivery task, whether or
        not the pending list has room: for a task that must not write itself (one a
        cancel scope of its own may stop mid-write, which would cut a block in two)."""
        if self.closed:
            return
        self._pending.extend(transmissions)
        self._pending_batches += 1
        if not self._writing:
            self.wake_delivery()

    async def wait_for_room(self) -> None:
        """Return once the pending list has room."""
        while self._pending_batches >= self._max_pending and not self.closed:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    async def push(self, transmissions: list[bytes]) -> None:
        """Write a batch from this task, or leave it to the task that is writing
        (waiting for room if the pending list is full)."""
        if self.closed:
            raise TransportClosed("connection closed")
        if self._writing:
            while self._pending_batches >= self._max_pending and self._writing:
                if self._room is None:
                    self._room = trio.Event()
                await self._room.wait()
                if self.closed:
                    raise TransportClosed("connection closed")
            if self._writing:
                self._pending.extend(transmissions)
                self._pending_batches += 1
                return
        await self._write(transmissions)

    async def _write(self, transmissions: list[bytes]) -> None:
        """Write what is pending, then `transmissions`, then whatever was left
        pending meanwhile, packed into as few blocks as fit."""
        self._writing = True
        try:
            if self._pending:
                batch = self._take_pending()
                batch.extend(transmissions)
            else:
                batch = transmissions
            packer = BatchPacker()
            send_blocks = self.transport.send_blocks
            while batch:
                blocks = []
                for t in batch:
                    if (full := packer.pack(t)) is not None:
                        blocks.append(full)
                del batch
                if len(packer):
                    blocks.append(packer.take_block())
                await send_blocks(blocks)  # one write for all of them, where it can
                del blocks
                batch = self._take_pending()
        finally:
            self._writing = False

    def _take_pending(self) -> list[bytes]:
        pending, self._pending = self._pending, []
        if self._pending_batches:
            self._pending_batches = 0
            if self._room is not None:
                self._room.set()
                self._room = None
        return pending

    def take_pending(self) -> list[bytes]:
        """What is waiting to be written, taken out (a connection that is not running
        keeps what it would send here)."""
        return self._take_pending()

    def push_events(self, transmissions: list[bytes]) -> None:
        """Hand over END/DELD/NMSG pushes without waiting, keeping their order."""
        if not self.overflow_events:
            try:
                self.push_nowait(transmissions)
                return
            except trio.WouldBlock:
                pass
        self.overflow_events.extend(transmissions)
        self.wake_delivery()

    # --- the delivery task ----------------------------------------------------------

    def wake_delivery(self) -> None:
        """There is delivery work: start the delivery task unless it runs already
        (it looks for work again before it ends, so nothing is missed)."""
        if self._delivering or self.closed or self._handler is None:
            return
        assert self.nursery is not None
        self._delivering = True
        self.nursery.start_soon(self._deliver, self._handler, self._client)

    async def _deliver(self, handler: ClientHandler[Client], client: Client) -> None:
        """The delivery task: until there is no work left. Its end for a transport's
        fault ends the connection; so does any other error (through the nursery)."""
        try:
            while True:
                if self._pending and not self._writing:
                    await self._write([])
                await handler.delivery_loop(client)
                # No checkpoint since delivery_loop found no work: only what was left
                # pending meanwhile can be there, and a task that writes takes it.
                if not self._pending or self._writing:
                    return
        except TransportClosed as e:
            self.close_reason = self.close_reason or str(e)
            assert self.nursery is not None
            self.nursery.cancel_scope.cancel()
        finally:
            self._delivering = False

    # --- tasks ------------------------------------------------------------------

    async def run(self, handler: ClientHandler[Client], client: Client) -> None:
        """Serve the client until it leaves. The receive loop runs in the calling task
        itself; the delivery task is started only when there is work for it."""
        self.last_activity = trio.current_time()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._handler, self._client = handler, client
            self._receiving = True
            receive_block = self.transport.receive_block
            # The receive loop, here rather than in a method of its own: an idle
            # connection waits in it, and each frame it waits in is memory it keeps.
            try:
                while True:
                    block = await receive_block()
                    self.last_activity = trio.current_time()
                    responses = await handler.process_block(client, block)
                    del block  # an idle connection keeps nothing of its last block alive
                    if responses:
                        await self.push(responses)
                    del responses
                    handler.answered(client)
            except TransportClosed as e:
                self.close_reason = self.close_reason or str(e)
            finally:
                self._receiving = False
                # Nothing more is started once the receive loop is gone.
                self._handler = None
                nursery.cancel_scope.cancel()

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        """Start a helper task (a per-queue delivery task) in this connection's nursery."""
        assert self.nursery is not None
        self.nursery.start_soon(self._closing_on_transport_error, fn, *args)

    def close_now(self, reason: str) -> None:
        """End the connection's tasks (the router's cleanup follows)."""
        self.close_reason = self.close_reason or reason
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    def close(self) -> None:
        """Stop accepting pushes; called once the tasks are gone."""
        self.closed = True
        self._pending = []
        self._pending_batches = 0
        self.overflow_events = []
        self._handler = self._client = None  # the client state refers back to us
        for event in (self._room, self._closed_event):
            if event is not None:
                event.set()

    async def wait_closed(self) -> None:
        """Return once the connection's tasks are gone and the router has forgotten it."""
        if not self.closed:
            if self._closed_event is None:
                self._closed_event = trio.Event()
            await self._closed_event.wait()

    def task_count(self) -> int:
        """Tasks serving this connection: the receiving one and those in its nursery,
        nested nurseries included."""
        if self.nursery is None:
            return 0
        return int(self._receiving) + count_tasks(self.nursery)

    async def _closing_on_transport_error(
        self, fn: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        try:
            await fn(*args)
        except TransportClosed as e:
            self.close_reason = self.close_reason or str(e)
            assert self.nursery is not None
            self.nursery.cancel_scope.cancel()
