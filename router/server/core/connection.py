"""One client connection: its I/O and the tasks serving it.

Theory of operation (DESIGN.md, STYLE.md principle 7). An idle connection is
one task, the receive loop (the task that called `run`), waiting for a block.
Nothing sits between the task that makes a transmission and the socket:

- receive: reads a block, has the dispatcher verify and execute it, and writes
  the answers itself (`push`), packed into as few blocks as fit, in one write
  where the transport can. When the next block is in already (the transport's
  `block_ready`), the answers are held in the pending list instead and go out
  with that block's answers: a client that pipelines gets one write for both.
  Held answers never wait for anything but the receive loop's own work: the
  moment reading or answering the next block would wait (for a turn, a
  store's commit, a proxied command's slot, the socket), the delivery task is
  woken to write them (`_releasing_held_answers`);
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
  written by that task while the connection is idle (its receive loop waits
  for a block, nobody is writing, nothing is pending), as far as the socket
  takes them at once (`_write_now`; the transport keeps the rest and the
  delivery task sends it), else appended to the pending list, which the
  receive loop's next write or the delivery task writes;
- delivery: the one task that does this client's waiting work: the pending
  list when nobody is writing, END/DELD events that found the pending list
  full, the queues in its `deliveries` map (subscriptions.py) and the
  catch-up walk of a service subscription (`services.py`), which starts once
  the SUBS answer has been written or is pending (`ClientHandler.answered`),
  so `SOKS` precedes its messages. It is started on demand (`wake_delivery`)
  and ends as soon as it has nothing to do, so an idle connection has none.

A delivered message therefore costs two task steps: the sender's receive
loop reads the SEND and writes the MSG to the idle recipient's socket, and the
recipient's receive loop reads the ACK (and answers it in the same step). A
recipient that is busy with a block, being written to, or whose socket is
full, gets the MSG through its pending list instead.

What the client is subscribed to is not kept here: a connection only does
I/O. `run` is given a `ClientHandler` (the router's, shared by every
connection) and the client's own state, which it hands back to the handler
untouched: no object is made per connection to join the two.

A connection has no nursery of its own (a nursery is memory every idle
connection would keep). Its receive loop runs in the task that called `run`,
inside the cancel scope it is given (the listener's for that connection):
`close_now` cancels it. The tasks it needs beside (the delivery task, in
per-queue-task mode a task per subscribed queue, proxied commands: `spawn`)
run in a nursery shared by the connections (the router's), each under a
cancel scope of its own, registered when the task is started. When the
receive loop ends for any reason, it cancels those scopes and waits, shielded,
until the tasks are gone; then the router's cleanup runs. An error in one of
them is logged and ends its connection, not the shared nursery.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio

from router.protocol.block import BatchPacker

from ..edge.arrivals import arrivals
from ..edge.block_stream import BlockStream, TransportClosed, block_ready_check, sends_now
from ..edge.handshake import Handshake, ServiceSession
from .tasks import count_tasks, noting_waits

log = logging.getLogger(__name__)

Client = TypeVar("Client")
T = TypeVar("T")
# The pending list of a connection with nothing pending: shared, never added to
# (`Connection._add_pending` makes a list of the connection's own first).
_NO_PENDING: list[bytes] = []


class Cancellable(Protocol):
    """What `close_now` cancels: the connection's scope, or what ends a connection
    served on demand."""

    def cancel(self) -> None: ...


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
        "_scope", "_helper_nursery", "_helpers", "_helpers_gone",
        "_closed_event", "_receiving", "_delivering", "_handler", "_client",
        "_pending", "_pending_batches", "_max_pending", "_writing", "_room", "_block_ready",
        "_sends_now", "_unflushed", "_reading", "_answers_held", "answers_elsewhere",
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
        # A service, by its TLS client certificate (docs/protocol.md#client-service).
        self.service: ServiceSession | None = handshake.client_service
        self.service_id: bytes | None = (
            None if self.service is None else self.service.service_id
        )
        # END/DELD/ENDS waiting for pending room (made when one does: few ever do)
        self.overflow_events: list[bytes] | None = None
        self.closed = False
        self.close_reason = ""
        self.last_activity = 0.0  # trio time the client last sent a block (set by run())
        # Set by run(): the cancel scope the connection's task runs in, the nursery its
        # helper tasks run in (shared with other connections), and those tasks, each
        # under a cancel scope of its own (made on the first: most connections have none).
        self._scope: Cancellable | None = None
        self._helper_nursery: trio.Nursery | None = None
        self._helpers: dict[trio.CancelScope, trio.lowlevel.Task | None] | None = None
        self._helpers_gone: trio.Event | None = None
        # Made only when someone waits: most connections never do.
        self._closed_event: trio.Event | None = None
        self._room: trio.Event | None = None  # set when the pending list is written
        # The task that called run(), while its receive loop runs.
        self._receiving: trio.lowlevel.Task | None = None
        self._delivering = False  # the delivery task runs
        self._handler: ClientHandler[Any] | None = None
        self._client: object = None
        # Transmissions waiting for the writing task: a list of its own made on use (an
        # idle connection, a shadow most of all, keeps none: docs/workers.md#costs).
        self._pending: list[bytes] = _NO_PENDING
        self._pending_batches = 0
        self._max_pending = send_queue_size
        self._writing = False  # a task is in `_write`
        self._block_ready = block_ready_check(transport)
        self._sends_now = sends_now(transport)
        self._unflushed = False  # the transport holds the rest of a write made now
        self._reading = False  # the receive loop waits for the client's next block
        # The receive loop holds answers in the pending list for the next block's, until
        # they are taken to be written (`_answers_wait`).
        self._answers_held = False
        # Set by the hand-offs while the receive loop waits for other workers' answers
        # to its block (docs/workers.md#hand-offs-in-blocks): what is left for the client
        # meanwhile waits in the pending list, while it has room, to go out with them in
        # the loop's write, as its answers held do, not woken to a write of its own.
        self.answers_elsewhere = False

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.transport.remote} v{self.version}>"

    # --- writing ----------------------------------------------------------------

    def outbox_full(self) -> bool:
        """Whether a batch pushed now would have to wait for room."""
        return self._pending_batches >= self._max_pending

    def push_may_wait(self) -> bool:
        """Whether a batch pushed now may have to wait for the client to read: the
        pending list is full while another task writes, or the socket did not take
        all of an earlier write (a block in progress then steps aside, turns.py)."""
        return self._unflushed or (self._writing and self.outbox_full())

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
        transmissions = self._after_events(transmissions)
        if self._write_now(transmissions):
            return
        self._add_pending(transmissions)
        self._pending_batches += 1
        if not self._writing and not (self.answers_elsewhere
                                      and self._pending_batches < self._max_pending):
            self.wake_delivery()

    def _write_now(self, transmissions: list[bytes]) -> bool:
        """Write a batch from this task without waiting, when the connection is idle
        (its receive loop waits for a block, nobody writes, nothing is pending, no
        rest of an earlier write): the MSG a SEND makes for an idle subscriber goes
        out from the sender's task, no delivery task started. What the socket does
        not take now stays with the transport, and the delivery task writes it.
        False if the batch must go the other way: into the pending list (bounded),
        where a busy receive loop packs it with its answers."""
        if self._pending or not self._may_send_now():
            return False
        self._send_now(transmissions)
        return True

    def _may_send_now(self) -> bool:
        transport = self._sends_now
        return (transport is not None and self._reading and not self._writing
                and not self._unflushed and transport.can_send_now())

    def _send_now(self, transmissions: list[bytes]) -> None:
        """What the socket does not take now stays with the transport, for the delivery
        task."""
        assert self._sends_now is not None
        try:
            written = self._sends_now.send_blocks_now(_packer(self._sends_now)(transmissions))
        except TransportClosed as e:
            self.close_now(str(e))
            return
        if not written:
            self._unflushed = True
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
                transmissions = self._after_events(transmissions)
                if transmissions:
                    self._add_pending(transmissions)
                    self._pending_batches += 1
                return
        await self._write(self._after_events(transmissions))

    def _after_events(self, transmissions: list[bytes]) -> list[bytes]:
        """`transmissions` behind the events that found the pending list full
        (`push_events`): nothing overtakes an END made before it, such as the OK of
        a SUB that took the queue back after it."""
        if not self.overflow_events:
            return transmissions
        events, self.overflow_events = self.overflow_events, None
        return events + transmissions

    def _answers_wait(self, transmissions: list[bytes]) -> bool:
        """Hold a block's answers (the receive loop's, once the block is done) in the
        pending list, unwritten, if the next block is in already and the pending list
        has room: so the loop answers that one in this same task step and writes both
        blocks' answers together (a client that pipelines gets a block per step, not
        per command). The order is the pending list's, as if they were written now.
        Nobody is woken: the receive loop writes them with the next block's answers,
        or alone if that block has none, unless it has to wait first
        (`_releasing_held_answers`)."""
        if not self._block_ready() or not self.hold_answers(transmissions):
            return False
        self._answers_held = True
        return True

    def _release_held_answers(self) -> None:
        """The receive loop is about to wait with answers held: have them written."""
        if (self._answers_held and self._pending and not self._writing
                and not self.answers_elsewhere):
            self.wake_delivery()

    def hold_answers(self, transmissions: list[bytes]) -> bool:
        """Keep a block's answers in the pending list, unwritten, while `answers_elsewhere`
        (other workers' answers to the block are awaited, docs/workers.md#pipelined-blocks):
        what comes meanwhile joins them there in its order, and `write_pending` writes
        them all. False if the pending list has no room (then write them now)."""
        if self._pending_batches >= self._max_pending:
            return False
        if transmissions:
            self._add_pending(transmissions)
            self._pending_batches += 1
        return True

    def write_pending(self) -> None:
        """Have what is pending written: at once from this task when nothing else writes
        and the receive loop waits for a block (as `_write_now`), else by the task that
        writes, else by the delivery task."""
        if not self._pending or self._writing or self.closed:
            return
        if self._may_send_now():
            self._send_now(self._take_pending())
        else:
            self.wake_delivery()

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
            transport = self.transport
            send_blocks, pack = transport.send_blocks, _packer(transport)
            if self._unflushed and not batch:
                await send_blocks([])  # the rest of a write made now
            self._unflushed = False  # any write sends that rest first
            while batch:
                blocks = pack(batch)
                del batch
                await send_blocks(blocks)  # one write for all of them, where it can
                del blocks
                batch = self._take_pending()
        finally:
            self._writing = False

    def _add_pending(self, transmissions: list[bytes]) -> None:
        pending = self._pending
        if pending is _NO_PENDING:
            self._pending = list(transmissions)
        else:
            pending.extend(transmissions)

    def _take_pending(self) -> list[bytes]:
        pending, self._pending = self._pending, _NO_PENDING
        self._answers_held = False
        if self._pending_batches:
            self._pending_batches = 0
            if self._room is not None:
                self._room.set()
                self._room = None
        return [] if pending is _NO_PENDING else pending

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
        if self.overflow_events is None:
            self.overflow_events = []
        self.overflow_events.extend(transmissions)
        self.wake_delivery()

    # --- the delivery task ----------------------------------------------------------

    def wake_delivery(self) -> None:
        """There is delivery work: start the delivery task unless it runs already
        (it looks for work again before it ends, so nothing is missed)."""
        if self._delivering or self.closed or self._handler is None:
            return
        self._delivering = True
        self._start_helper(self._deliver, self._handler, self._client)

    async def _deliver(self, handler: ClientHandler[Client], client: Client) -> None:
        """The delivery task: until there is no work left. Its end for a transport's
        fault ends the connection; so does any other error (`_helper`)."""
        try:
            while True:
                if (self._pending or self._unflushed) and not self._writing:
                    await self._write([])
                await handler.delivery_loop(client)
                # No checkpoint since delivery_loop found no work: only what was left
                # pending meanwhile can be there, and a task that writes takes it.
                if not (self._pending or self._unflushed) or self._writing:
                    return
        except TransportClosed as e:
            self.close_now(str(e))
        finally:
            self._delivering = False

    # --- tasks ------------------------------------------------------------------

    async def run(
        self, handler: ClientHandler[Client], client: Client, scope: trio.CancelScope,
        helpers: trio.Nursery,
    ) -> None:
        """Serve the client until it leaves. The receive loop runs in the calling task
        itself, inside `scope`: cancelling it ends the connection (`close_now`). Any
        other task the connection needs (the delivery task, when there is work for it;
        per-queue tasks; proxied commands) runs in `helpers`, a nursery shared by the
        connections, under a cancel scope of its own that the connection cancels, and
        waits for, when it ends: no task of a connection outlives it."""
        self.last_activity = trio.current_time()
        self._scope, self._helper_nursery = scope, helpers
        self._handler, self._client = handler, client
        self._receiving = trio.lowlevel.current_task()
        receive_block = self.transport.receive_block
        # The receive loop, here rather than in a method of its own: an idle
        # connection waits in it, and each frame it waits in is memory it keeps.
        try:
            while True:
                self._reading = True
                if self._answers_held:
                    block = await self._releasing_held_answers(receive_block())
                else:
                    block = await receive_block()
                self._reading = False
                self.last_activity = trio.current_time()
                answering = handler.process_block(client, block)
                # The block is the handler's alone from here: one parked for its turn
                # keeps only its content (dispatch.py), and an idle connection keeps
                # nothing of its last block alive.
                del block
                if self._answers_held:
                    responses = await self._releasing_held_answers(answering)
                else:
                    responses = await answering
                del answering
                if (responses or self._answers_held) and not self._answers_wait(responses):
                    await self.push(responses)
                del responses
                handler.answered(client)
        except TransportClosed as e:
            self.close_reason = self.close_reason or str(e)
        finally:
            self._receiving, self._reading = None, False
            # Nothing more is started once the receive loop is gone.
            self._handler = None
            # Taking a connection apart (its helpers, then the router's cleanup of its
            # subscriptions) takes a place in the arrivals, behind clients' blocks: a
            # crowd that leaves at once is taken apart a few per pass (edge/arrivals.py).
            # Shielded: a connection the router ends is cancelled already.
            with trio.CancelScope(shield=True):
                await arrivals().admit_later()
            if self._helpers:
                await self._end_helpers()

    # --- served without a receive loop (another worker's client: workers/handoff.py) ---

    def serve_on_demand(self, handler: ClientHandler[Client], client: Client,
                        ender: Cancellable, helpers: trio.Nursery) -> None:
        """Serve the client without a receive loop of its own: an idle client here is
        memory, no task. Its blocks are answered by `answer_blocks`, in a task that
        exists while it has some; `close_now` calls `ender.cancel()`, which ends it;
        `end_on_demand` takes it apart, as the end of `run` does. Its `last_activity`
        is not kept (a float of every such client): no idle timeout applies to it."""
        self._scope, self._helper_nursery = ender, helpers
        self._handler, self._client = handler, client
        self._reading = True  # idle until `answer_blocks`: a write may go at once

    async def answer_blocks(self, next_block: Callable[[], bytes | None]) -> None:
        """The receive loop's work in the calling task, for the blocks `next_block`
        gives until it gives None (a connection served on demand)."""
        handler, client = self._handler, self._client
        assert handler is not None, "served on demand and not ended"
        self._reading = False
        try:
            while (block := next_block()) is not None:
                answering = handler.process_block(client, block)
                del block
                responses = await answering
                del answering
                if responses:
                    await self.push(responses)
                del responses
                handler.answered(client)
        finally:
            self._reading = True

    async def end_on_demand(self) -> None:
        """What the end of `run` does, for a connection served on demand: nothing more
        is started, and its helper tasks are gone when this returns."""
        self._handler = None
        with trio.CancelScope(shield=True):
            await arrivals().admit_later()
        if self._helpers:
            await self._end_helpers()

    def _releasing_held_answers(self, work: Awaitable[T]) -> Awaitable[T]:
        """Await `work` (the receive loop's reading or answering of its next block,
        with answers held), waking the delivery task to write the held answers once
        `work` would wait for anything: they are delayed by the receive loop's own
        work, never by a wait, whichever it is."""
        return noting_waits(work, self._release_held_answers)

    async def _end_helpers(self) -> None:
        """Cancel the connection's helper tasks and wait until they are gone (shielded:
        the connection's own scope may be cancelled already, and the router's cleanup
        must not run while one of them still does)."""
        assert self._helpers is not None
        for scope in self._helpers:
            scope.cancel()
        with trio.CancelScope(shield=True):
            while self._helpers:
                self._helpers_gone = trio.Event()
                await self._helpers_gone.wait()

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        """Start a helper task (a per-queue delivery task, a proxied command) that ends
        with the connection; a transport's fault in it ends the connection."""
        self._start_helper(self._closing_on_transport_error, fn, *args)

    def _start_helper(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        assert self._helper_nursery is not None
        # The scope is made and registered now, not when the task first runs: a
        # connection that ends before then cancels it all the same.
        scope = trio.CancelScope()
        if self._helpers is None:
            self._helpers = {}
        try:
            self._helper_nursery.start_soon(self._helper, scope, fn, *args)
        except RuntimeError:
            # The router is stopping: its nursery has ended and takes no new task. A
            # scope registered for a task that never runs would keep the receive loop's
            # end (`_end_helpers`) waiting for ever, and the process with it.
            self.close_now("the router is stopping")
            return
        self._helpers[scope] = None

    async def _helper(
        self, scope: trio.CancelScope, fn: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """One helper task: `fn` under its own scope. It runs in a nursery shared by
        every connection, so an error in it ends this connection only."""
        helpers = self._helpers
        assert helpers is not None
        helpers[scope] = trio.lowlevel.current_task()
        try:
            with scope:
                await fn(*args)
        except Exception:
            log.exception("%r: a task serving it failed", self)
            self.close_now("internal error")
        finally:
            del helpers[scope]
            if not helpers:
                if self._helpers is helpers:
                    self._helpers = None  # an emptied dict keeps its table: ~220 B
                if self._helpers_gone is not None:
                    self._helpers_gone.set()

    def close_now(self, reason: str) -> None:
        """End the connection's tasks (the router's cleanup follows)."""
        self.close_reason = self.close_reason or reason
        if self._scope is not None:
            self._scope.cancel()

    def close(self) -> None:
        """Stop accepting pushes; called once the tasks are gone."""
        self.closed = True
        self._pending = _NO_PENDING
        self._pending_batches = 0
        self.overflow_events = None
        self._handler = self._client = None  # the client state refers back to us
        self._helper_nursery = None
        for event in (self._room, self._closed_event):
            if event is not None:
                event.set()

    async def wait_closed(self) -> None:
        """Return once the connection's tasks are gone and the router has forgotten it."""
        if not self.closed:
            if self._closed_event is None:
                self._closed_event = trio.Event()
            await self._closed_event.wait()

    @property
    def receiving_task(self) -> trio.lowlevel.Task | None:
        """The task running the connection's receive loop (None once it has ended)."""
        return self._receiving

    def helper_tasks(self) -> list[trio.lowlevel.Task]:
        """The connection's helper tasks that have started (not its receiving task)."""
        return [task for task in (self._helpers or {}).values() if task is not None]

    def task_count(self) -> int:
        """Tasks serving this connection: the receiving one and its helpers (started
        or about to be), with the tasks of their nurseries."""
        count = int(self._receiving is not None) + len(self._helpers or ())
        for task in self.helper_tasks():  # those started, with tasks of their own
            count += sum(count_tasks(nursery) for nursery in task.child_nurseries)
        return count

    async def _closing_on_transport_error(
        self, fn: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        try:
            await fn(*args)
        except TransportClosed as e:
            self.close_now(str(e))


def _packer(transport: object) -> Callable[[list[bytes]], list[bytes]]:
    """How the transport takes a write: padded blocks (`_packed`), unless it packs
    writes itself (its `pack`: a shadow's transport sends the transmissions to its
    front as they are, and the front packs them with its own, workers/handoff.py)."""
    return getattr(transport, "pack", _packed)


def _packed(transmissions: list[bytes]) -> list[bytes]:
    """The transmissions in as few blocks as they fit, in order."""
    packer = BatchPacker()
    blocks = [full for t in transmissions if (full := packer.pack(t)) is not None]
    if len(packer):
        blocks.append(packer.take_block())
    return blocks
