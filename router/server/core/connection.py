"""One client connection: its I/O and the small group of tasks serving it.

Theory of operation (DESIGN.md, STYLE.md principle 7): after the handshake a
connection runs three tasks (the receive loop in the connection's own task,
the other two in its nursery) joined by a bounded memory channel (the outbox):

- receive: reads a block, has the dispatcher verify and execute it, and puts
  the responses into the outbox as one batch (blocking only itself when the
  outbox is full, which is the back-pressure a fast sender gets);
- send: takes whatever batches are queued, packs them into as few blocks as
  fit and writes them; a peer that does not take a block within the
  configured deadline is dropped (the transport's `send_blocks`);
- delivery: the one task that waits for this client's pushes that could not
  go straight into the outbox: END/DELD events the router's event task could
  not hand over without waiting, and the work its `ClientSubscriptions` has
  (subscriptions.py): queues in the `deliveries` map and the catch-up walk
  of a service subscription (`services.py`), which starts once the SUBS
  answer is in the outbox (`ClientHandler.answered`), so `SOKS` precedes its
  messages.

What the client is subscribed to is not kept here: a connection only does
I/O. `run` is given a `ClientHandler` (the router's, shared by every
connection) and the client's own state, which it hands back to the handler
untouched: no object is made per connection to join the two.

In per-queue-task mode each subscribed queue also has a task of its own in
the same nursery. When one of the three tasks ends, for any reason, the
nursery is cancelled and the router's cleanup runs in `finally`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

from router.protocol.block import BatchPacker
from router.protocol.handshake import service_id

from ..edge.block_stream import STREAM_GONE, BlockStream, TransportClosed
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
        """The client's delivery task; `Connection.wait_wakeup` waits for work."""
        ...

    def answered(self, client: Client) -> None:
        """A block's answers are in the outbox."""
        ...


class Connection:
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
        self.overflow_events: list[bytes] = []  # END/DELD/ENDS waiting for outbox room
        self.closed = False
        self.close_reason = ""
        self.last_activity = 0.0  # trio time the client last sent a block (set by run())
        self._closed_event = trio.Event()
        self.nursery: trio.Nursery | None = None
        self._receiving = False  # the receive loop runs (in the task that called run())
        self._wakeup = trio.Event()
        self._outbox, self._outbox_out = trio.open_memory_channel[list[bytes]](send_queue_size)

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.transport.remote} v{self.version}>"

    # --- outbox ---------------------------------------------------------------

    def outbox_full(self) -> bool:
        stats = self._outbox.statistics()
        return (
            stats.current_buffer_used >= stats.max_buffer_size
            and stats.tasks_waiting_receive == 0
        )

    def push_nowait(self, transmissions: list[bytes]) -> None:
        """Queue a batch without waiting; `trio.WouldBlock` if the outbox is full.

        A closed connection swallows the batch: its client will never read it.
        """
        if self.closed:
            return
        try:
            self._outbox.send_nowait(transmissions)
        except STREAM_GONE:
            pass

    async def push(self, transmissions: list[bytes]) -> None:
        try:
            await self._outbox.send(transmissions)
        except STREAM_GONE as e:
            raise TransportClosed("connection closed") from e

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

    # --- delivery task's wake-up ------------------------------------------------

    def wake_delivery(self) -> None:
        self._wakeup.set()

    async def wait_wakeup(self) -> None:
        """Return once `wake_delivery` was called (at once if it was since the last time)."""
        await self._wakeup.wait()
        self._wakeup = trio.Event()

    # --- tasks ------------------------------------------------------------------

    async def run(self, handler: ClientHandler[Client], client: Client) -> None:
        """Serve the client until one of its tasks ends. The receive loop runs in the
        calling task itself: one task fewer per connection than a child of its own."""
        self.last_activity = trio.current_time()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self._until_done, self._send_loop)
            nursery.start_soon(self._until_done, handler.delivery_loop, client)
            self._receiving = True
            try:
                await self._until_done(self._receive_loop, handler, client)
            finally:
                self._receiving = False

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
        self._outbox.close()
        self._outbox_out.close()
        self._closed_event.set()

    async def wait_closed(self) -> None:
        """Return once the connection's tasks are gone and the router has forgotten it."""
        await self._closed_event.wait()

    def task_count(self) -> int:
        """Tasks serving this connection: the receiving one and those in its nursery,
        nested nurseries included."""
        if self.nursery is None:
            return 0
        return int(self._receiving) + count_tasks(self.nursery)

    async def _until_done(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        try:
            await fn(*args)
        except TransportClosed as e:
            self.close_reason = self.close_reason or str(e)
        finally:
            assert self.nursery is not None
            self.nursery.cancel_scope.cancel()

    async def _closing_on_transport_error(
        self, fn: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        try:
            await fn(*args)
        except TransportClosed as e:
            self.close_reason = self.close_reason or str(e)
            assert self.nursery is not None
            self.nursery.cancel_scope.cancel()

    async def _receive_loop(self, handler: ClientHandler[Client], client: Client) -> None:
        while True:
            block = await self.transport.receive_block()
            self.last_activity = trio.current_time()
            responses = await handler.process_block(client, block)
            del block  # an idle connection keeps nothing of its last block alive
            if responses:
                await self.push(responses)
            del responses
            handler.answered(client)

    async def _send_loop(self) -> None:
        packer = BatchPacker()
        outbox = self._outbox_out
        send_blocks = self.transport.send_blocks
        while True:
            batch = await outbox.receive()
            # One pass of the scheduler first: responses that other tasks are about to
            # queue (the next block of the same client, a push) share this block.
            await trio.lowlevel.checkpoint()
            blocks = []
            while True:  # drain what is queued now into as few blocks as fit
                for t in batch:
                    if (full := packer.pack(t)) is not None:
                        blocks.append(full)
                try:
                    batch = outbox.receive_nowait()
                except trio.WouldBlock:
                    break
            del batch  # nor of its last responses
            if len(packer):
                blocks.append(packer.take_block())
            await send_blocks(blocks)  # one write for all of them, where the transport can
            del blocks
