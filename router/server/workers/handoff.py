"""Commands handed to the worker that owns their queue (docs/workers.md#hand-offs-in-blocks).

A client's connection lands on any worker: its *front*. Each block it sends is
split by owner (`Ownership.owner_of` of each transmission's entity id; a NEW
with short-link data by its sender id; the rest stays in the front): the
front's own part is answered as in one process, and each other owner's part
goes to that owner as one frame, in a block of its own. In the owner the
client is a *shadow*: a `Connection` like any other, whose transport is the
channel (`ShadowTransport`), so verification, commands, subscriptions, the one
unacknowledged message per queue, END on displacement and delivery all run
there as in one process. What the shadow writes (its answers and its pushes,
in the order it writes them) comes back to the front as frames and goes into
the real connection's one writing path.

The order of one owner's answers and pushes to a client is kept (one ordered
link per direction). A block's answers from the other workers are written
first, as each owner gives them, then the front's own: the front returns its
answers once every owner's part is answered (the shadow marks the end of each
part's answers in its stream, `_PART_DONE`). So an answer the front gives itself
(a PING last in a block) follows every answer, and every MSG answering a SUB, of
the commands before it, as in one process; the answers of different owners are
not in the block's order among themselves. A front reads a connection's next block
while its last waits for owners if that block names only queues (and of its own, only
its own queues) and subscribes to none: the answers of blocks in flight wait in the
connection's pending list, in their order, and go out each time one is answered; a
block that names no queue waits for them all first (docs/workers.md#pipelined-blocks).

Some commands are not one owner's: an RFWD's transmission is known once the front
has opened it (core/forwarded.py), then runs in its owner as a part of its own;
SUBS / NSUBS (a service's queues are in every worker) and LGET / LKEY (a contact
queue's link id is the client's) go to every worker, and the front makes one
answer of theirs (docs/workers.md#service-subscriptions,
docs/workers.md#a-contact-queues-link-id).

Back-pressure: a front sends at most `WINDOW` blocks to a shadow that it has
not answered yet, and a shadow at most `WINDOW` writes the front has not taken; the
front takes a write once the real connection's pending list has room. So a
slow client holds its own shadows' writers, as it holds a connection's writer
in one process, and no worker's memory grows for it. And a worker's connections
have at most `BLOCKS_AWAITING_OWNERS` blocks waiting for other workers' answers at
once: in a burst the rest wait, keeping only their block, and read no more.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import struct
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
)
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from router.protocol.block import (
    MAX_TRANSMISSION_SIZE,
    BatchPacker,
    decode_batch_content,
    pad_block,
    unpad_block,
)
from router.protocol.codec import (
    decode_command,
    decode_response,
    encode_command,
    encode_response_transmission,
)
from router.protocol.ids_hash import ids_hash_bytes, ids_hash_int
from router.protocol.transmission import (
    decode_transmission,
    encode_transmission,
    entity_and_command_offset,
)
from router.protocol.types import (
    AUTH,
    ERR,
    LARGE_MSG,
    LGET,
    NEW,
    SOKS,
    ProtocolError,
    Response,
    Transmission,
)
from router.protocol.versions import has_service_field
from store.interfaces import Party

from ..core.connection import Connection
from ..core.ownership import ID_SIZE, OWNER_BYTES, Ownership
from ..core.services import all_received
from ..core.serving import ClientServing
from ..core.subscriptions import ClientSubscriptions
from ..core.tasks import noting_waits
from ..core.verified import error_transmission
from ..edge.block_stream import TransportClosed
from ..edge.handshake import Handshake, ServiceSession
from ..router import Router
from .channel import Frame, LinkLost, Links
from .layout import SHARED_STORES

log = logging.getLogger(__name__)

OPEN, BLOCK, BLOCK_TAKEN, CLOSE, OUT, OUT_TAKEN, GONE = range(1, 8)  # BLOCK_TAKEN: not sent
# An OUT frame outside the shadow's window, never taken back (no OUT_TAKEN): one per part
# the shadow has answered, the last of the write that follows its answers. The front's
# window of parts bounds them, and its receive loop the answers they bring.
OUT_ANSWERED = 8
# A contact NEW's link id held reserved by owner(link id) for a front, its grant and
# its end (docs/workers.md#a-contact-queues-link-id); the payload is the link id.
RESERVE, RESERVED, RELEASE = 20, 21, 22
# Written by a shadow after a part's answers, in their stream: no real transmission
# is empty (router/protocol/transmission.py), and the front takes it out.
_PART_DONE = b""
# Begins a part of forwarded transmissions (RFWD, opened in the front) in a shadow's
# blocks, and each of their answers in its writes: a padded block begins with its
# content's length (below 0x40 00), and an answer with its empty authorization (0).
_FORWARDED = b"\xffFWD"
WINDOW = 4  # blocks (or writes) sent to the other side and not taken yet
# A front tells a shadow of the writes it took in the credit of its next block to it
# (the ACK after a MSG), or in an OUT_TAKEN once this many are untold: a frame per
# write taken would be a frame more per handed-off MSG. At most WINDOW, so a shadow whose
# window is spent always gets them back (the writes in flight make up the rest).
TAKEN_TOLD_AT = WINDOW // 2
OUT_FRAME_BYTES = 1 << 17  # a shadow's write goes back in frames of about this much at most
# What a front keeps of its shadows' writes to send with a block's own answers; beyond
# it they go to the connection as they come (its pending list is bounded, its frames'
# OUT_TAKEN wait for room there).
COLLECTED_BYTES = 1 << 17
# At most this many blocks of a worker's own connections wait for other workers'
# answers at once (docs/workers.md#hand-offs-in-blocks, "RSS after a burst"): in a
# burst every client's block in flight at once (its transmissions, parts and answers,
# small objects) scatters the subscriptions made meanwhile over pymalloc arenas that
# stay after it. A connection whose block finds them all taken waits, keeping only its
# block, and reads no next one meanwhile (its client's blocks wait in the kernel, as for
# a slower router). Enough blocks (of ~100 SUBs) to keep an owner busy verifying: the
# storm at 2 workers is as fast as without a bound; few enough that a burst leaves few
# arenas: 86-100 B of RSS per idle subscription at 2 workers, against one worker's
# ~96 B (324 B unbounded; 99-216 B at 32; bench/RESULTS.md, "RSS per idle
# subscription with a bound ...").
BLOCKS_AWAITING_OWNERS = 16
# Blocks in flight (docs/workers.md#pipelined-blocks: SENDs, ACKs... that subscribe to
# nothing) have places of their own. Each place is a hand-off's round trip at a time, so
# the 16 above shared would cap a worker's handed-off blocks at 16 per round trip, and
# a burst of SENDs would hold a SUB block back (or the other way); these leave nothing
# behind that lives on, so their bound is only their bytes (64 blocks, <= 1 MB).
BLOCKS_IN_FLIGHT = 64
# Commands a front answers itself whatever their entity id: they name no queue
# (the proxy's, PING; an RFWD's inner transmission goes to its owner, below).
_LOCAL_TAGS = frozenset({b"PING", b"PRXY", b"PFWD", b"RFWD"})
# A service's subscriptions: its queues are in every worker, so every worker walks
# its own (docs/workers.md#service-subscriptions).
_SERVICE_TAGS = {b"SUBS": Party.RECIPIENT, b"NSUBS": Party.NOTIFIER}
# A link's commands: a contact queue's link id is the client's, of any worker, so
# they are asked of every worker, and the one that has the link answers.
_LINK_TAGS = frozenset({b"LGET", b"LKEY"})
_EVERY = -1  # the owner of what every worker answers for its own queues
_TAG_PEEK = 6  # bytes of a command enough to tell the tags above (5 at most) apart
# The first four bytes of each tag above (every one has four or more): a command that
# does not begin with one of them is none of them, and goes by its entity id.
# A subscribing command's first 4 bytes: its block waits for its answers rather than
# going in flight (docs/workers.md#pipelined-blocks).
_SUBSCRIBING_HEADS = frozenset({b"SUB", b"SUB ", b"NSUB"})
_SPECIAL_HEADS = frozenset(tag[:4] for tag in (*_LOCAL_TAGS, *_SERVICE_TAGS, *_LINK_TAGS))
# A transmission's service signature field when it has none (docs/protocol.md#service-signature).
_NO_SERVICE_SIGNATURE = 0x30


@dataclass(slots=True)
class _Owner:
    """A front's parts handed to one owner (its shadow there); a front's owners are a
    chain (`next`): a list of every worker would be more for few shadows."""

    worker: int
    next: _Owner | None = None
    free: int = WINDOW  # parts it may still send before one more is answered
    sent: int = 0
    answered: int = 0
    gone: bool = False  # its worker died: nothing more is sent to its next process
    taken: int = 0  # its shadow's writes taken and not told yet (`TAKEN_TOLD_AT`)


@dataclass(slots=True)
class _Seldom:
    """What a front keeps for proxied commands, commands sent to every worker and
    service subscriptions: made on first use, which most fronts never see."""

    # owner -> the answers to the forwarded transmissions of its part in progress
    forwarded: dict[int, list[list[bytes]]] | None = None
    forwarding: dict[int, trio.Lock] | None = None  # owner -> its part's turn
    # A block's commands sent to every worker, by corrId: the side of a SUBS / NSUBS
    # (None: LGET / LKEY) and the other workers' answers, made into one answer.
    gathered: dict[bytes, tuple[Party | None, list[bytes]]] | None = None
    # owner -> its part of a block with SUBS: what it writes after the part's answers
    # (its walk) waits, with the frames' OUT_TAKEN, until the front's SOKS is written.
    hold_after: dict[int, int] | None = None
    held: list[bytes] | None = None
    held_taken: list[tuple[int, Frame]] | None = None
    walks_left: int = 0  # the workers whose SUBS walk has not written its ALLS yet


def _seldom(name: str, default: object = None) -> Any:
    """A `_Front` attribute kept in its `_Seldom`, made when set to something."""

    def get(front: _Front) -> Any:
        return default if front.seldom is None else getattr(front.seldom, name)

    def put(front: _Front, value: object) -> None:
        if front.seldom is None:
            if value == default:
                return
            front.seldom = _Seldom()
        setattr(front.seldom, name, value)

    return property(get, put)


class _Front:
    """A client connection of this worker and the owners it has shadows in.

    Every client whose queues spread keeps one, so what most never use is made on
    first use: a dict is 65-225 B, an event ~270 B, a semaphore ~340 B
    (`python -m bench workers_shadow` lists the sites)."""

    __slots__ = ("conn", "client", "owners", "progress", "seldom", "collected",
                 "collected_bytes", "collected_after", "collected_taken", "in_flight")

    def __init__(self, conn: Connection, client: ClientSubscriptions) -> None:
        self.conn, self.client = conn, client
        self.owners: _Owner | None = None  # the first of the chain
        # Made by a task that waits for parts, set (and dropped) as parts are answered.
        self.progress: trio.Event | None = None
        self.seldom: _Seldom | None = None
        # While a block is answered, what its shadows write, kept to go with the front's
        # own answers in the block's write (None: left to the connection as it comes);
        # its bytes, whether the block's answers are out of `process_block` already, and
        # the OUT_TAKEN of what the shadows wrote since, held until they are written.
        self.collected: list[bytes] | None = None
        self.collected_bytes = 0
        self.collected_after = False
        self.collected_taken: list[tuple[int, Frame]] | None = None
        # Its blocks answered already but for their parts in other workers (each as
        # (owner, the number of its last part there) pairs), oldest first: the
        # connection reads on meanwhile (docs/workers.md#pipelined-blocks).
        self.in_flight: list[list[tuple[_Owner, int]]] | None = None

    forwarded: dict[int, list[list[bytes]]] | None = _seldom("forwarded")
    forwarding: dict[int, trio.Lock] | None = _seldom("forwarding")
    gathered: dict[bytes, tuple[Party | None, list[bytes]]] | None = _seldom("gathered")
    hold_after: dict[int, int] | None = _seldom("hold_after")
    held: list[bytes] | None = _seldom("held")
    held_taken: list[tuple[int, Frame]] | None = _seldom("held_taken")
    walks_left: int = _seldom("walks_left", 0)

    def owner(self, worker: int) -> _Owner | None:
        owner = self.owners
        while owner is not None and owner.worker != worker:
            owner = owner.next
        return owner

    def add_owner(self, worker: int) -> _Owner:
        owner = self.owners = _Owner(worker, self.owners)
        return owner

    def shadow_workers(self) -> list[int]:
        """The workers it has a shadow in (not those that died since)."""
        workers, owner = [], self.owners
        while owner is not None:
            if not owner.gone:
                workers.append(owner.worker)
            owner = owner.next
        return workers

    def gathering(self) -> dict[bytes, tuple[Party | None, list[bytes]]]:
        if self.gathered is None:
            self.gathered = {}
        return self.gathered

    async def wait_progress(self) -> None:
        if self.progress is None:
            self.progress = trio.Event()
        await self.progress.wait()

    def parts_answered(self, owner: _Owner, parts: int) -> None:
        """`parts` more of the owner's parts are answered: their blocks are taken."""
        owner.answered += parts
        owner.free += parts
        progress, self.progress = self.progress, None
        if progress is not None:
            progress.set()

    async def wait_answered(self, worker: int, parts: int) -> None:
        owner = self.owner(worker)
        assert owner is not None, "parts are awaited of a worker they were handed to"
        while owner.answered < parts:
            await self.wait_progress()

    async def wait_all_answered(self) -> None:
        """Until every part it handed off is answered (its blocks in flight too)."""
        while self.in_flight:
            await self.wait_progress()

    def settled(self) -> int:
        """Take out its blocks in flight whose parts are all answered (or whose owner
        died: the connection is closed then); how many."""
        in_flight, done = self.in_flight, 0
        while in_flight and all(owner.answered >= last or owner.gone
                                for owner, last in in_flight[0]):
            del in_flight[0]
            done += 1
        if not in_flight:
            self.in_flight = None
        return done


@dataclass(frozen=True, slots=True)
class ShadowServing:
    """How a shadow is served: as any client, its answers to each part followed by
    the mark of their end."""

    own: ClientServing

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        transport = client.conn.transport
        # What the shadow writes while it works on the part (a costly block writes its
        # answers so far at each pause, dispatch.py) waits for the part's last answers:
        # one frame back to the front for the part, not one per pause.
        transport.holding = True  # type: ignore[attr-defined]
        try:
            if block.startswith(_FORWARDED):
                client.in_block = True  # as ClientServing.process_block
                answers = [_FORWARDED + _join(await self.own.dispatcher.run_forwarded(
                    client, transmission[2:], int.from_bytes(transmission[:2], "big")))
                    for transmission in _split(block[len(_FORWARDED):])]
            else:
                try:
                    raws = decode_batch_content(block)
                except ProtocolError:  # not from a front's sort: answered as a block
                    answers = await self.own.process_block(client, pad_block(block))
                else:
                    answers = await self.own.process_transmissions(client, raws)
        finally:
            # Another of the front's blocks waits: this part's answers go with its
            # answers, one frame for both (as one process writes a pipelining client's
            # answers together, `Connection._answers_wait`), unless the pass waits
            # first (`ShadowTransport.release_answered`).
            transport.holding = transport.more_blocks()  # type: ignore[attr-defined]
        answers.append(_PART_DONE)
        transport.parts_answered += 1  # type: ignore[attr-defined]
        return answers

    def delivery_loop(self, client: ClientSubscriptions) -> Awaitable[None]:
        return self.own.delivery_loop(client)

    def answered(self, client: ClientSubscriptions) -> None:
        self.own.answered(client)


def _flag(bit: int) -> Any:
    """A boolean attribute of a `ShadowTransport` kept as a bit of its `_flags`."""

    def get(transport: ShadowTransport) -> bool:
        return bool(transport._flags & bit)

    def put(transport: ShadowTransport, value: bool) -> None:
        transport._flags = transport._flags | bit if value else transport._flags & ~bit

    return property(get, put)


class ShadowTransport:
    """A shadow's transport: blocks from its front, writes back to it as frames. It
    also serves the shadow on demand (`Connection.serve_on_demand`): an idle shadow
    is no task, only memory (bench/RESULTS.md, "Worker processes": a task and its
    frames were ~1.5 KB of every shadow); a task answers its blocks while it has
    some, and takes the shadow apart if it ends."""

    __slots__ = ("remote", "_handoff", "_front_worker", "_front_id", "_blocks", "_client",
                 "_out_free", "_room", "_pass", "_flags", "_held", "parts_answered")
    shadow = True  # not a client of this worker's own: no idle timeout (router.py)
    stalled = False
    web_challenge = None

    def __init__(self, handoff: Handoff, front_worker: int, front_id: int, remote: str) -> None:
        self.remote = remote
        self._handoff = handoff
        self._front_worker, self._front_id = front_worker, front_id
        self._blocks: list[bytes] | None = None  # the front's, not answered yet (<= WINDOW)
        self._client: ClientSubscriptions | None = None  # set by `serve`
        # Writes the front may still take before it has taken one (a semaphore is
        # ~340 B), and what a write waits on for one, made when one waits.
        self._out_free = WINDOW
        self._room: trio.Event | None = None
        self._pass: trio.CancelScope | None = None  # the task answering blocks, if one does
        # `_busy`, `_ending`, `ended_by_front` and `holding` (below), as bits of one
        # slot: 24 B less per shadow (bench/RESULTS.md, "What a client's hand-offs keep").
        self._flags = 0
        self._held: list[bytes] | None = None
        self.parts_answered = 0  # parts answered since the last frame outside the window

    # A task answers blocks or takes the shadow apart.
    _busy = _flag(1)
    _ending = _flag(2)
    ended_by_front = _flag(4)
    # While a part is worked on (`ShadowServing`), what is written is held, and goes
    # with the part's answers.
    holding = _flag(8)

    def serve(self, router: Router, handshake: Handshake, serving: ShadowServing) -> None:
        self._client = router.open_shadow(self, handshake, serving, self)

    def deliver(self, block: bytes) -> None:
        """A block from the front (within its window, so never more than WINDOW)."""
        blocks = self._blocks
        if self._ending or (blocks is not None and len(blocks) >= WINDOW):
            if not self._ending:
                log.warning("worker %d overran its window to a shadow: ending it",
                            self._front_worker)
            self.cancel()
            return
        if blocks is None:
            self._blocks = [block]
        else:
            blocks.append(block)
        self._start()

    def _next_block(self) -> bytes | None:
        blocks = self._blocks
        if not blocks or self._ending:
            return None
        block = blocks.pop(0)
        if not blocks:
            self._blocks = None
        # No BLOCK_TAKEN: the front counts a block taken once its part is answered (the
        # _PART_DONE mark, `_write_to_front`), a frame less each way per part. The
        # part stays a batch's content, not padded: `ShadowServing` takes it apart.
        return block

    def more_blocks(self) -> bool:
        """Whether a block of the front's waits to be answered after this one."""
        return self._blocks is not None and not self._ending

    def release_answered(self) -> None:
        """The pass answering its blocks is about to wait (for a store, a turn, its
        window): what it holds of parts answered goes to the front now, in a frame
        outside the window, rather than after the wait."""
        held = self._held
        if held is not None and self.parts_answered and self._handoff.links.send_nowait(
                self._front_worker, Frame(OUT_ANSWERED, self._front_id, _join(held))):
            self._held = None
            self.parts_answered = 0

    def _start(self) -> None:
        if not self._busy:
            self._busy = True
            self._handoff.shadow_servers.queue(self)

    def taken(self, writes: int) -> None:
        self._out_free += writes
        room, self._room = self._room, None
        if room is not None:
            room.set()

    def cancel(self) -> None:
        """End the shadow (`Connection.close_now`, the front's CLOSE, the front's
        worker gone): its task is cancelled, and it is taken apart."""
        if self._ending:
            return
        self._ending = True
        if self._pass is not None:
            self._pass.cancel()
        self._start()

    end = cancel

    async def _serve_blocks(self) -> None:
        """Answer the blocks waiting, then return (or take the shadow apart if it ends),
        in one of the worker's `_ShadowServers`."""
        client = self._client
        assert client is not None
        conn = client.conn
        try:
            with trio.CancelScope() as self._pass:
                await conn.answer_blocks(self._next_block)
        except TransportClosed as e:
            conn.close_reason = conn.close_reason or str(e)
            self._ending = True
        except trio.Cancelled:
            # The worker stops (its own scope is caught by the `with`): its front's worker
            # learns it from their link, and this one's links take no more frames.
            self._ending = self.ended_by_front = True
            raise
        except Exception:
            log.exception("%r: answering its blocks failed", conn)
            conn.close_reason = conn.close_reason or "internal error"
            self._ending = True
        finally:
            self._pass = None
            if self._ending:
                with trio.CancelScope(shield=True):
                    await self._take_apart(client)
            else:
                self._busy = False  # no wait since the last block was taken

    async def _take_apart(self, client: ClientSubscriptions) -> None:
        handoff = self._handoff
        try:
            await client.conn.end_on_demand()
        finally:
            assert handoff._router is not None
            handoff._router.close_shadow(client)
            handoff.shadow_gone(self._front_worker, self._front_id, self)
            await self.aclose(handoff._router.config.close_timeout)

    async def receive_block(self) -> bytes:
        raise TransportClosed("a shadow's blocks are answered on demand")

    @staticmethod
    def pack(transmissions: list[bytes]) -> list[bytes]:
        """A write as `send_blocks` takes it (`Connection._write`): its transmissions as
        they are, not packed into padded blocks, since the front packs them again with
        its own answers; a block's 16 KB made and taken apart per write saved."""
        return transmissions

    async def send_block(self, block: bytes) -> None:
        raise TransportClosed("a shadow has no handshake: it writes transmissions")

    async def send_blocks(self, transmissions: list[bytes]) -> None:
        """What is held, then `transmissions` (`pack`), in frames of at most
        OUT_FRAME_BYTES, each within the window (a write of a full pending list is
        many); while `holding`, the last frame's worth is kept for the next write.
        The connection writes from one task at a time, so what is held keeps its place."""
        held = self._held
        if held is not None:
            self._held = None
            held.extend(transmissions)
            transmissions = held
        if not transmissions:
            return
        _check_sizes(transmissions)
        framed = transmissions
        if _framed_size(transmissions) > OUT_FRAME_BYTES:
            framed, size = [], 0
            for t in transmissions:
                if framed and size + 4 + len(t) > OUT_FRAME_BYTES:
                    await self._send_out(framed)
                    framed, size = [], 0
                framed.append(t)
                size += 4 + len(t)
        if self.holding:
            self._held = list(framed)  # extended by the next write: not the caller's list
        else:
            await self._send_out(framed, last=True)

    def can_send_now(self) -> bool:
        return self._held is None and not self.holding and (
            self._out_free > 0 or self.parts_answered > 0)

    def send_blocks_now(self, transmissions: list[bytes]) -> bool:
        """A write from any task without waiting (`Connection._write_now`: a MSG that a
        SEND makes for this shadow's idle client) as one frame, when its window and the
        link have room: no delivery task started for it. Else it is held, and False:
        the connection's next write (its delivery task's) sends it first."""
        _check_sizes(transmissions)
        if _framed_size(transmissions) <= OUT_FRAME_BYTES:
            if self.parts_answered:
                if self._handoff.links.send_nowait(
                        self._front_worker,
                        Frame(OUT_ANSWERED, self._front_id, _join(transmissions))):
                    self.parts_answered = 0
                    return True
            elif self._out_free > 0:
                self._out_free -= 1
                if self._handoff.links.send_nowait(
                        self._front_worker, Frame(OUT, self._front_id, _join(transmissions))):
                    return True
                self._out_free += 1
        self._held = list(transmissions)  # the caller's list is the caller's
        return False

    async def _send_out(self, framed: list[bytes], *, last: bool = False) -> None:
        """A frame within the window; or outside it, the last of a write after a part
        was answered (`OUT_ANSWERED`)."""
        if last and self.parts_answered:
            self.parts_answered = 0
            await self._send(Frame(OUT_ANSWERED, self._front_id, _join(framed)))
            return
        while self._out_free <= 0:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()
        self._out_free -= 1
        await self._send(Frame(OUT, self._front_id, _join(framed)))

    async def _send(self, frame: Frame) -> None:
        try:
            await self._handoff.links.send(self._front_worker, frame)
        except LinkLost as e:
            raise TransportClosed(str(e)) from e

    def established(self) -> None:
        pass

    async def aclose(self, timeout: float) -> None:
        if not self.ended_by_front:
            with trio.move_on_after(timeout):
                try:
                    await self._handoff.links.send(self._front_worker,
                                                   Frame(GONE, self._front_id, b""))
                except LinkLost:
                    pass


class _ShadowServers:
    """The tasks that answer this worker's shadows' blocks: a few for the worker, not
    a task started and ended for every part (bench/RESULTS.md, "Worker processes": a
    task of a part's own was ~8 us of it, a task lingering in each shadow ~300 B of
    every shadow). A shadow with blocks waiting is queued once (its `_busy` bit), and
    one task at a time answers it until none waits, so its blocks keep their order;
    the task then takes the next shadow queued, with no pass of the scheduler between
    them. A task about to wait while it serves a shadow (a store, its window to the
    front, a slow client) has another one take the queue meanwhile, woken or
    started, so no shadow waits for another's wait: the tasks grow with the shadows
    that wait at once, and fall back to `IDLE_KEPT` idle ones as they run out of work."""

    IDLE_KEPT = 4

    __slots__ = ("_handoff", "_ready", "_idle", "_coming", "tasks")

    def __init__(self, handoff: Handoff) -> None:
        self._handoff = handoff
        self._ready: deque[ShadowTransport] = deque()
        self._idle: list[trio.lowlevel.Task] = []
        self._coming = 0  # tasks woken or started that have not looked at `_ready` yet
        self.tasks = 0

    def queue(self, shadow: ShadowTransport) -> None:
        """`shadow` has blocks waiting (or ends): a task takes it in turn."""
        self._ready.append(shadow)
        if not self._coming:
            self._call_one()

    def _call_one(self) -> None:
        self._coming += 1
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop())
            return
        nursery = self._handoff._nursery
        assert nursery is not None
        self.tasks += 1
        nursery.start_soon(self._serve)

    def _waits(self, shadow: ShadowTransport) -> None:
        """The task serving `shadow` waits: another takes the shadows queued."""
        shadow.release_answered()
        if self._ready and not self._coming:
            self._call_one()

    async def _serve(self) -> None:
        ready, idle = self._ready, self._idle
        task = trio.lowlevel.current_task()

        def stop_waiting(_: object) -> trio.lowlevel.Abort:
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            while True:
                self._coming -= 1
                while ready:
                    shadow = ready.popleft()
                    await noting_waits(shadow._serve_blocks(), partial(self._waits, shadow))
                if len(idle) >= self.IDLE_KEPT:
                    return
                idle.append(task)
                await trio.lowlevel.wait_task_rescheduled(stop_waiting)
        except trio.Cancelled:
            # The worker stops: the shadows still queued end as the one served did.
            while ready:
                with trio.CancelScope(shield=True):
                    shadow = ready.popleft()
                    shadow._ending = shadow.ended_by_front = True
                    await shadow._serve_blocks()
            raise
        finally:
            self.tasks -= 1


class Handoff:
    """This worker's side of the hand-offs: its fronts' shadows elsewhere, and the
    shadows it serves for the other workers' fronts."""

    def __init__(self, ownership: Ownership, group: str) -> None:
        self.ownership = ownership
        self.links = Links(group, ownership.index, ownership.workers, self._on_frame,
                           self._on_peer_lost)
        self._router: Router | None = None
        self._serving: ClientServing | None = None  # the router's own, for its parts
        self._shadow_serving: ShadowServing | None = None
        self._fronts: dict[int, _Front] = {}
        # front worker -> its connection's id -> the shadow (a key of two ints is a tuple
        # more of every shadow)
        self._shadows: list[dict[int, ShadowTransport]] = [
            {} for _ in range(ownership.workers)]
        self._nursery: trio.Nursery | None = None
        self.shadow_servers = _ShadowServers(self)
        # Its fronts' blocks waiting for other workers' answers (`BLOCKS_AWAITING_OWNERS`)
        # and in flight (`BLOCKS_IN_FLIGHT`), by their connection's id; a semaphore of
        # each kind parks the rest in their order.
        self._places = BLOCKS_AWAITING_OWNERS + BLOCKS_IN_FLIGHT
        self._awaiting_owners = trio.Semaphore(BLOCKS_AWAITING_OWNERS)
        self._in_flight_places = trio.Semaphore(BLOCKS_IN_FLIGHT)
        # connection id -> the places its blocks hold (each one's semaphore)
        self._awaiting: dict[int, list[trio.Semaphore]] = {}
        self.awaiting_peak = 0  # the most at once, for tests and benches
        self._reservations = _LinkReservations()
        # (holder, front connection, link id) -> set once the holder granted it
        self._reserving: dict[tuple[int, int, bytes], trio.Event] = {}
        # (front worker, its connection, link id) -> set when the front releases it
        self._held_for: dict[tuple[int, int, bytes], trio.Event] = {}

    def install(self, router: Router) -> None:
        """Serve `router`'s connections as fronts (before its listener accepts)."""
        self._router = router
        self._serving = router.install_serving(self)
        self._shadow_serving = ShadowServing(self._serving)
        router.dispatcher.route_forwarded(self)
        router.services.walk_done = self.own_walk_done
        if router.config.store in SHARED_STORES:
            router.services.share_a_store(self.ownership)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.links.run)
            task_status.started()

    # --- the front: ClientHandler of this worker's own connections ----------------

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        assert self._serving is not None
        conn = client.conn
        split = self._split(conn, block)
        if split is None:
            front = self._fronts.get(conn.id)
            if front is None or not front.in_flight:
                return await self._serving.process_block(client, block)
            if not self._may_go_in_flight(conn, block):
                await front.wait_all_answered()
                return await self._serving.process_block(client, block)
            return self._held(front, await self._serving.process_block(client, block))
        parts, gathered, contacts = split
        in_flight = not gathered and not contacts and self._may_go_in_flight(conn, parts)
        places = self._in_flight_places if in_flight else self._awaiting_owners
        try:
            places.acquire_nowait()
        except trio.WouldBlock:
            # Its place waited for with only the block kept (taken apart again after):
            # the parts of every block waiting at once are what the bound saves.
            del split, parts, gathered, contacts
            await places.acquire()
            try:
                split = self._split(conn, block)
            except BaseException:
                places.release()
                raise
            assert split is not None, "the same block splits the same way"
        self._awaiting.setdefault(conn.id, []).append(places)
        held = self._places - self._awaiting_owners.value - self._in_flight_places.value
        if held > self.awaiting_peak:
            self.awaiting_peak = held
        try:
            if in_flight:
                return await self._process_in_flight(client, split[0], block)
            return await self._process_handed_off(client, block, split)
        except BaseException:
            self._stop_awaiting(conn)  # the connection ends: its blocks in flight too
            raise
        finally:
            if not in_flight:
                self._release_place(conn, places)

    def _release_place(self, conn: Connection, places: trio.Semaphore) -> None:
        """One of the connection's blocks waits no more for other workers' answers."""
        held = self._awaiting.get(conn.id)
        if held is None:
            return  # given back already (`_stop_awaiting`)
        held.remove(places)
        if not held:
            del self._awaiting[conn.id]
        places.release()

    def _stop_awaiting(self, conn: Connection) -> None:
        """The connection's blocks wait no more for other workers' answers: waiting for
        its own client to read (`_write_to_front`), which does not hold every other
        connection of the worker, or ended."""
        for places in self._awaiting.pop(conn.id, ()):
            places.release()

    def _may_go_in_flight(self, conn: Connection, block: dict[int, list[bytes]] | bytes
                          ) -> bool:
        """Whether a block (its transmissions by owner, or a block of the front's own)
        may be answered while the connection's blocks in flight wait for other workers
        (docs/workers.md#pipelined-blocks): none of its transmissions subscribes, and
        each of the front's own names a queue of the front's. A PING, a proxy's command,
        a NEW, an error... waits: its answer follows every answer of the commands
        before it, as in one process."""
        here = self.ownership.index
        if isinstance(block, bytes):
            try:
                block = {here: decode_batch_content(unpad_block(block))}
            except ProtocolError:
                return False
        version, owner_of = conn.version, self.ownership.owner_of
        for owner, transmissions in block.items():
            for raw in transmissions:
                try:
                    entity_id, at = entity_and_command_offset(raw, version)
                except ProtocolError:
                    return False
                head = raw[at:at + 4]
                if head in _SUBSCRIBING_HEADS or owner == here and (
                        len(entity_id) != ID_SIZE or head in _SPECIAL_HEADS
                        or owner_of(entity_id) != here):
                    return False
        return True

    async def _process_handed_off(self, client: ClientSubscriptions, block: bytes,
                                  split: tuple[dict[int, list[bytes]],
                                               dict[bytes, Party | None],
                                               dict[bytes, tuple[bytes, bytes]]]
                                  ) -> list[bytes]:
        """The answers of a block that waits for its owners' answers (and for those of
        the connection's blocks in flight before it)."""
        parts, gathered, contacts = split
        front = self._front(client)
        await front.wait_all_answered()
        if not gathered:
            # The shadows' writes go out with the front's answers, in one write where
            # they fit, rather than each by the connection's delivery task as it comes.
            front.collected, front.collected_bytes = [], 0
        try:
            if contacts:
                # Its link ids held until the NEW has run: a NEW of one of them elsewhere
                # waits, then finds it taken.
                async with self._links_reserved(front, contacts):
                    answers = await self._process_parts(client, front, parts, gathered,
                                                        contacts)
            else:
                answers = await self._process_parts(client, front, parts, gathered, contacts,
                                                    None if gathered else _whole(parts, block))
        except BaseException:
            collected, front.collected = front.collected, None
            if collected:
                client.conn.leave(collected)
            raise
        collected = front.collected
        if collected:
            answers = collected + answers
            # Until the receive loop has these answers in its write (`answered`), what
            # the shadows write next waits here, after them.
            front.collected = []
            front.collected_after = True
        else:
            front.collected = None
            if not answers:  # no write of the receive loop's for what waits meanwhile
                client.conn.wake_delivery()
        return answers

    async def _process_in_flight(self, client: ClientSubscriptions,
                                 parts: dict[int, list[bytes]], block: bytes) -> list[bytes]:
        """Hand the block's parts to their owners and answer its own part (queues of this
        worker's only) without waiting for the owners: the connection reads its next
        block meanwhile (docs/workers.md#pipelined-blocks). Its own answers wait in the
        connection's pending list, where its owners' answers and what else is left for
        the client join them in their order, and go out once a block in flight is
        answered (`_settle`): in one write, as one block's answers do. The block keeps
        its place among the blocks in flight (`BLOCKS_IN_FLIGHT`) until then."""
        assert self._serving is not None
        front = self._front(client)
        whole = _whole(parts, block)
        own = parts.pop(self.ownership.index, None)
        awaited = await self._hand_parts(front, parts, whole)
        handed = []
        for owner, last in awaited.items():
            window = front.owner(owner)
            assert window is not None, "a part handed off opened its owner's window"
            handed.append((window, last))
        if front.in_flight is None:
            front.in_flight = []
        front.in_flight.append(handed)
        client.conn.answers_elsewhere = True
        self._settle(front)  # answered while the others were handed off
        if not own:
            return []
        return self._held(front, await self._serving.process_transmissions(client, own))

    @staticmethod
    def _held(front: _Front, answers: list[bytes]) -> list[bytes]:
        """A block's own answers while blocks are in flight: kept in the pending list,
        to go out with what they wait for (`_settle`); else returned, to go out now."""
        if front.in_flight and front.conn.hold_answers(answers):
            return []
        return answers

    def _settle(self, front: _Front) -> None:
        """Its blocks in flight that are answered now give their places back, and what
        waits for the client goes out."""
        settled = front.settled()
        if not settled:
            return
        for _ in range(settled):
            self._release_place(front.conn, self._in_flight_places)
        conn = front.conn
        conn.answers_elsewhere = bool(front.in_flight)
        conn.write_pending()

    async def _hand_parts(self, front: _Front, parts: dict[int, list[bytes]],
                          whole: bytes | None) -> dict[int, int]:
        """Each owner's part to its shadow; each owner's number of its last part there.
        With a service's subscriptions in the block, what an owner writes after it
        is held from then on (`hold_after`)."""
        awaited: dict[int, int] = {}
        for owner, transmissions in parts.items():
            for content in ([unpad_block(whole)] if whole is not None
                            else _contents(transmissions)):
                awaited[owner] = await self._hand_to(front, owner, content)
            if front.hold_after is not None:
                front.hold_after[owner] = awaited[owner]
        return awaited

    async def _process_parts(self, client: ClientSubscriptions, front: _Front,
                             parts: dict[int, list[bytes]], gathered: dict[bytes, Party | None],
                             contacts: dict[bytes, tuple[bytes, bytes]],
                             whole: bytes | None = None) -> list[bytes]:
        assert self._serving is not None
        refused = await self._refuse_taken_links(front, parts, contacts) if contacts else []
        own = parts.pop(self.ownership.index, None)
        # Apart from the rest, so that their answers are all in what the dispatcher
        # returns (a costly block writes its answers so far when it pauses: dispatch.py).
        everywhere = parts.pop(_EVERY, None)
        for corr_id, party in gathered.items():
            front.gathering()[corr_id] = (party, [])
        services = any(party is not None for party in gathered.values())
        if Party.RECIPIENT in gathered.values():
            front.walks_left = self.ownership.workers
        if services and front.hold_after is None:
            front.hold_after, front.held, front.held_taken = {}, [], []
        awaited = await self._hand_parts(front, parts, whole)
        # Each a subset of one block's transmissions: as that block, not packed into one
        # to be taken apart again.
        everywheres = (await self._serving.process_transmissions(client, everywhere)
                       if everywhere else [])
        answers: list[bytes] = refused
        own, after_ping = _split_at_ping(own, client.conn.version) if own else (own, None)
        if own:
            answers.extend(await self._serving.process_transmissions(client, own))
        conn = client.conn
        # The front's own answers so far wait in the pending list, where a push for one
        # of its queues made meanwhile (a MSG, an END) goes after them, as in one
        # process; what joins them there goes out with the owners' answers, not in a
        # write of its own (`Connection.answers_elsewhere`), as the shadows' writes
        # do (`collected`). The answers made one with every worker's (`everywheres`)
        # wait for theirs, and a PING's PONG for all of them: it comes last.
        if conn.hold_answers(answers):
            answers = []
        conn.answers_elsewhere = True
        try:
            for owner, count in awaited.items():
                await front.wait_answered(owner, count)
            await front.wait_all_answered()  # the blocks before it in flight
        finally:
            conn.answers_elsewhere = False
        if everywheres:
            answers.extend(self._gathered_answer(front, answer) for answer in everywheres)
        if gathered:
            front.gathered = None
        if after_ping:
            answers.extend(await self._serving.process_transmissions(client, after_ping))
        return answers

    def delivery_loop(self, client: ClientSubscriptions):  # type: ignore[no-untyped-def]
        assert self._serving is not None
        return self._serving.delivery_loop(client)

    def answered(self, client: ClientSubscriptions) -> None:
        assert self._serving is not None and self._nursery is not None
        self._serving.answered(client)
        front = self._fronts.get(client.conn.id)
        if front is not None and front.collected_after:
            self._release_collected(front)
        if front is not None and front.hold_after is not None:
            # The block's SOKS is written: the other workers' walks follow it.
            held, held_taken = front.held, front.held_taken
            front.hold_after = front.held = front.held_taken = None
            if held:
                client.conn.leave(held)
            for peer, taken in held_taken or ():
                self._nursery.start_soon(self._taken_once_room, client.conn, peer, taken)

    def _release_collected(self, front: _Front) -> None:
        """What the shadows wrote since the block's answers went to the connection,
        and their OUT_TAKEN held meanwhile."""
        assert self._nursery is not None
        collected, front.collected, front.collected_after = front.collected, None, False
        conn = front.conn
        if collected:
            conn.leave(collected)
        for peer, taken in front.collected_taken or ():
            if conn.outbox_full() or not self.links.send_nowait(peer, taken):
                self._nursery.start_soon(self._taken_once_room, conn, peer, taken)
        front.collected_taken = None

    def _split(self, conn: Connection, block: bytes) -> tuple[
            dict[int, list[bytes]], dict[bytes, Party | None], dict[bytes, tuple[bytes, bytes]]
    ] | None:
        """The block's transmissions by owner; those sent to every worker by corrId (a
        SUBS / NSUBS by its side, an LGET / LKEY by None); its NEWs of contact queues
        (raw -> corrId, link id). None if they are all this worker's and no NEW of a
        contact queue (or the block does not parse: the dispatcher answers that)."""
        try:
            raws = decode_batch_content(unpad_block(block))
        except ProtocolError:
            return None
        version, service = conn.version, conn.service_id is not None
        ownership = self.ownership
        here, workers = ownership.index, ownership.workers
        # The usual transmission's owner is told in place (below); ids moved from another
        # count of workers go by `owner_of`.
        in_place = not ownership.exceptions
        service_field = has_service_field(version)
        contacts: dict[bytes, tuple[bytes, bytes]] = {}
        parts: dict[int, list[bytes]] = {}
        gathered: dict[bytes, Party | None] = {}
        # One pass: most of a block is SUBs, SENDs and ACKs, whose owner is their entity
        # id's, told from a look at it and at the command's first bytes; the rest goes by
        # `_owner`. The usual one (no service signature, an entity id of ID_SIZE, a
        # command that is none of the tags above) is read in place, as
        # `entity_and_command_offset` and `owner_of` would: ~0.65 us a SUB of a block of
        # 100, against ~0.9 with a call of each per transmission (`python -m bench
        # workers_split`; 1.08 for `_owner`).
        for raw in raws:
            entity = 0  # where its entity id starts, if it is the usual one
            try:
                pos = 1 + raw[0]  # past the authorization
                if service_field and pos > 1:  # a signature ('1'): `_owner` reads it
                    pos = pos + 1 if raw[pos] == _NO_SERVICE_SIGNATURE else 0
                if pos:
                    pos += 1 + raw[pos]  # past the corrId
                    at = pos + 1 + raw[pos]  # past the entity id
                    if (at - pos == 1 + ID_SIZE and at <= len(raw)
                            and raw[at:at + 4] not in _SPECIAL_HEADS):
                        entity = pos + 1
            except IndexError:  # cut short: `_owner` tells (it stays here)
                pass
            if entity and in_place:
                owner = int.from_bytes(raw[entity:entity + OWNER_BYTES], "big") % workers
            else:
                owner = self._owner(raw, version, service, contacts)
            if owner == _EVERY:
                t = decode_transmission(raw, version)
                if t.corr_id in gathered:  # their answers could not be told apart
                    owner = here
                else:
                    gathered[t.corr_id] = _SERVICE_TAGS.get(t.command.split(b" ", 1)[0])
                    for worker in range(self.ownership.workers):
                        # This worker's copy under _EVERY: answered as a block of its own
                        parts.setdefault(_EVERY if worker == here else worker,
                                         []).append(raw)
                    continue
            part = parts.get(owner)
            if part is None:
                parts[owner] = [raw]
            else:
                part.append(raw)
        if not contacts and not gathered and (not parts or here in parts and len(parts) == 1):
            return None
        return parts, gathered, contacts

    def _owner(self, raw: bytes, version: int, service: bool,
               contacts: dict[bytes, tuple[bytes, bytes]]) -> int:
        here = self.ownership.index
        try:
            # A look at the entity id and the tag: most of a block is SUBs, SENDs and ACKs,
            # which need no more (the owner takes them apart again).
            entity_id, at = entity_and_command_offset(raw, version)
        except ProtocolError:
            return here  # answered with its error here
        tag = raw[at:at + _TAG_PEEK].split(b" ", 1)[0]
        if tag in _LOCAL_TAGS:
            return here
        if entity_id and tag not in _SERVICE_TAGS and tag not in _LINK_TAGS:
            return here if len(entity_id) != ID_SIZE else self.ownership.owner_of(entity_id)
        try:
            t = decode_transmission(raw, version)
        except ProtocolError:
            return here
        if tag in _SERVICE_TAGS:
            # A connection without a service is refused here; an empty corrId could
            # not be told from a push's, so it goes no further either.
            return _EVERY if service and t.corr_id else here
        if tag in _LINK_TAGS:
            return _EVERY if t.corr_id else here
        if t.entity_id:
            if len(t.entity_id) != ID_SIZE:
                return here
            return self.ownership.owner_of(t.entity_id)
        if tag != b"NEW":
            return here
        try:
            cmd = decode_command(t.command, version)
        except ProtocolError:
            return here
        if isinstance(cmd, NEW) and cmd.link is not None:
            if cmd.link.link_id is not None:
                contacts[raw] = (t.corr_id, cmd.link.link_id)
            # The client chose the sender id: the queue is that id's owner's (docs/workers.md).
            return self.ownership.owner_of(cmd.link.sender_id)
        return here

    # --- forwarded transmissions (RFWD): forwarded.ForwardRoute --------------------

    def owner_elsewhere(self, transmission: bytes, version: int) -> int | None:
        try:
            t = decode_transmission(transmission, version)
        except ProtocolError:
            return None  # answered with its error here
        if t.command.split(b" ", 1)[0] in _LINK_TAGS:
            return _EVERY  # a contact queue's link id is the client's
        entity_id = t.entity_id
        if len(entity_id) != ID_SIZE:
            return None
        owner = self.ownership.owner_of(entity_id)
        return None if owner == self.ownership.index else owner

    async def run_elsewhere(self, client: ClientSubscriptions, owner: int,
                            forwarded: list[tuple[bytes, int]]) -> list[list[bytes]]:
        """One part to the owner's shadow of this client (through its window, as a
        block), each transmission with its version; its answers come back in the
        shadow's stream (`_write_to_front`). `_EVERY`: asked of every worker, and
        the answer of the one that has the queue taken."""
        if owner == _EVERY:
            return await self._run_everywhere(client, forwarded)
        front = self._front(client)
        if front.forwarding is None:
            front.forwarding, front.forwarded = {}, {}
        assert front.forwarded is not None
        lock = front.forwarding.get(owner)
        if lock is None:
            lock = front.forwarding[owner] = trio.Lock()
        async with lock:  # one part's answers at a time from an owner
            front.forwarded[owner] = answers = []
            part = _FORWARDED + _join([version.to_bytes(2, "big") + transmission
                                       for transmission, version in forwarded])
            await front.wait_answered(owner, await self._hand_to(front, owner, part))
            del front.forwarded[owner]
        if len(answers) != len(forwarded):  # a shadow answers each, or ends
            raise TransportClosed(f"worker {owner} answered {len(answers)} forwarded "
                                  f"transmissions of {len(forwarded)}")
        return answers

    async def _run_everywhere(self, client: ClientSubscriptions,
                              forwarded: list[tuple[bytes, int]]) -> list[list[bytes]]:
        assert self._router is not None
        here = self.ownership.index
        others = [w for w in range(self.ownership.workers) if w != here]
        theirs: dict[int, list[list[bytes]]] = {}

        async def ask(worker: int) -> None:
            theirs[worker] = await self.run_elsewhere(client, worker, forwarded)

        async with trio.open_nursery() as nursery:
            for worker in others:
                nursery.start_soon(ask, worker)
            own = [await self._router.dispatcher.run_forwarded(client, transmission, version)
                   for transmission, version in forwarded]
        answers = []
        for i, (_, version) in enumerate(forwarded):
            candidates = [own[i], *(theirs[w][i] for w in others)]
            found = [c for c in candidates if len(c) == 1]
            answers.append([_link_answer([c[0] for c in found], version)] if found else own[i])
        return answers

    # --- a contact queue's link id, the client's: one for the router -------------------

    async def _refuse_taken_links(self, front: _Front, parts: dict[int, list[bytes]],
                                  contacts: dict[bytes, tuple[bytes, bytes]]) -> list[bytes]:
        """The answers (AUTH, as to a taken link id in one process) of the NEWs of
        contact queues whose link id another worker has; they are taken out of their
        parts. Each other worker is asked with an LGET of the link id, as a client
        would (a worker's own store refuses a link id it has already)."""
        version = front.conn.version
        refused: list[bytes] = []
        for owner, raws in parts.items():
            kept = []
            for raw in raws:
                contact = contacts.get(raw)
                if contact is not None and await self._link_elsewhere(front, owner, *contact):
                    refused.append(error_transmission(contact[0], b"", AUTH, version))
                else:
                    kept.append(raw)
            parts[owner] = kept
        for owner in [owner for owner, raws in parts.items() if not raws]:
            del parts[owner]
        return refused

    @asynccontextmanager
    async def _links_reserved(self, front: _Front, contacts: dict[bytes, tuple[bytes, bytes]]
                              ) -> AsyncIterator[None]:
        """Every link id of the block's contact NEWs held reserved (in the order of the
        ids, so that two blocks never wait for each other's)."""
        async with AsyncExitStack() as stack:
            for link_id in sorted({link_id for _, link_id in contacts.values()}):
                await stack.enter_async_context(self._link_reserved(front, link_id))
            yield

    @asynccontextmanager
    async def _link_reserved(self, front: _Front, link_id: bytes) -> AsyncIterator[None]:
        holder = self.ownership.owner_of(link_id)
        if holder == self.ownership.index:
            async with self._reservations.held(link_id):
                yield
            return
        assert self._nursery is not None
        key = (holder, front.conn.id, link_id)
        granted = self._reserving[key] = trio.Event()
        try:
            try:
                await self.links.send(holder, Frame(RESERVE, front.conn.id, link_id))
            except LinkLost as e:
                raise TransportClosed(str(e)) from e
            await granted.wait()
            if self._reserving.get(key) is not granted:
                raise TransportClosed(f"worker {holder}, holding link ids, is gone")
            yield
        finally:
            if self._reserving.pop(key, None) is not None:
                # From a task of its own: also once this one is cancelled.
                self._nursery.start_soon(self._send_quietly, holder,
                                         Frame(RELEASE, front.conn.id, link_id))

    async def _hold_link(self, peer: int, conn_id: int, link_id: bytes) -> None:
        """Hold `link_id` reserved for a front of `peer` until it releases it (or is gone)."""
        key = (peer, conn_id, link_id)
        released = self._held_for[key] = trio.Event()
        try:
            async with self._reservations.held(link_id):
                if not released.is_set():
                    await self._send_quietly(peer, Frame(RESERVED, conn_id, link_id))
                    await released.wait()
        finally:
            if self._held_for.get(key) is released:
                del self._held_for[key]

    async def _link_elsewhere(self, front: _Front, owner: int, corr_id: bytes,
                              link_id: bytes) -> bool:
        """Whether a worker other than `owner` has a contact queue of `link_id`."""
        assert self._router is not None
        if owner != self.ownership.index and await self._router.queues.get_queue(
                Party.LINK, link_id) is not None:
            return True
        version = front.conn.version
        probe_id = secrets.token_bytes(ID_SIZE)
        probe = _contents([encode_transmission(
            Transmission(b"", probe_id, link_id, encode_command(LGET(), version)), version)])
        others = [w for w in range(self.ownership.workers)
                  if w not in (owner, self.ownership.index)]
        if not others:
            return False
        front.gathering()[probe_id] = (None, answers := [])
        try:
            awaited = {w: await self._hand_to(front, w, probe[0]) for w in others}
            for worker, count in awaited.items():
                await front.wait_answered(worker, count)
        finally:
            if front.gathered is not None:
                front.gathered.pop(probe_id, None)
        return any(_response(answer, version) != _NO_LINK for answer in answers)

    # --- service subscriptions (SUBS, NSUBS): every worker walks its own queues ------

    def _gathered_answer(self, front: _Front, answer: bytes) -> bytes:
        """The front's own answer to a command sent to every worker, made one with the
        other workers' answers."""
        version = front.conn.version
        t = decode_transmission(answer, version)
        entry = None if front.gathered is None else front.gathered.get(t.corr_id)
        if entry is None:
            return answer
        party, others = entry
        if party is None:
            return _link_answer([answer, *others], version)
        return self._service_answer(front, t, answer, party, others)

    def _service_answer(self, front: _Front, t: Transmission, answer: bytes, party: Party,
                        others: list[bytes]) -> bytes:
        """A SUBS / NSUBS: one SOKS with the sum of the counts and the XOR of the ids
        hashes (the hash of a union of disjoint sets), which the front's own holding
        keeps for its ENDS."""
        version = front.conn.version
        own = decode_response(t.command, version)
        if not isinstance(own, SOKS):
            return answer
        count, ids_hash = own.count, own.ids_hash
        for other in others:
            theirs = decode_response(decode_transmission(other, version).command, version)
            if not isinstance(theirs, SOKS):
                return other  # that worker's refusal
            count += theirs.count
            ids_hash = ids_hash_bytes(ids_hash_int(ids_hash) ^ ids_hash_int(theirs.ids_hash))
        assert self._router is not None
        held = self._router.subscriptions.service_held(front.client, party)
        if held is not None:
            held.count, held.ids_hash = count, ids_hash
        return encode_response_transmission(t.corr_id, t.entity_id, SOKS(count, ids_hash),
                                            version)

    def _shadow_write(self, front: _Front, transmission: bytes) -> bytes | None:
        """What a shadow wrote, as the client gets it: an answer to a command sent to
        every worker kept for the front's one answer; a service's ENDS dropped (the
        front's own carries the router's figures), its ALLS only from the last walk;
        None if not written."""
        try:
            t = decode_transmission(transmission, front.conn.version)
        except ProtocolError:
            return transmission
        command = t.command
        if front.conn.service_id is not None:
            if command.startswith(b"ENDS "):
                return None
            if command == b"ALLS":
                return transmission if self._walk_ended(front) else None
        entry = front.gathered.get(t.corr_id) if t.corr_id and front.gathered else None
        if entry is not None:
            entry[1].append(transmission)
            return None
        return transmission

    def _walk_ended(self, front: _Front) -> bool:
        front.walks_left -= 1
        return front.walks_left == 0

    def own_walk_done(self, client: ClientSubscriptions) -> list[bytes]:
        """`Services.walk_done` here: a front's ALLS once every worker's walk is done."""
        front = self._fronts.get(client.conn.id)
        if front is None or front.client is not client or self._walk_ended(front):
            return all_received(client)
        return []

    def _front(self, client: ClientSubscriptions) -> _Front:
        conn = client.conn
        front = self._fronts.get(conn.id)
        if front is None:
            front = self._fronts[conn.id] = _Front(conn, client)
        return front

    async def _hand_to(self, front: _Front, owner: int, payload: bytes) -> int:
        """Send a part to the owner's shadow (a batch's content, or forwarded
        transmissions); its number among the parts sent there."""
        window = front.owner(owner)
        try:
            if window is None:
                window = front.add_owner(owner)
                await self.links.send(owner, Frame(OPEN, front.conn.id,
                                                   encode_handshake(front.conn)))
            while window.free <= 0:
                await front.wait_progress()
            window.free -= 1
            # A block goes without its padding (nor is padded again in the shadow): a
            # part is often a small share of a block, and 16 KB per part in flight is
            # most of what hand-offs cost in memory and copies (bench/RESULTS.md,
            # "Worker processes").
            # With the writes taken from its shadow since the last block: no frame of
            # their own.
            taken, window.taken = window.taken, 0
            await self.links.send(owner, Frame(BLOCK, front.conn.id, payload, taken))
        except LinkLost as e:
            front.conn.close_now(f"its queues' worker {owner} cannot be reached: {e}")
            raise TransportClosed(str(e)) from e
        window.sent += 1
        return window.sent

    def forget(self, conn: Connection) -> None:
        """A front connection ended: its shadows end too."""
        self._stop_awaiting(conn)
        front = self._fronts.pop(conn.id, None)
        if front is None or self._nursery is None:
            return
        for owner in front.shadow_workers():
            self._nursery.start_soon(self._send_quietly, owner, Frame(CLOSE, conn.id, b""))

    async def _send_quietly(self, peer: int, frame: Frame) -> None:
        try:
            await self.links.send(peer, frame)
        except LinkLost:
            pass

    # --- frames from the other workers ----------------------------------------------

    async def _on_frame(self, peer: int, frame: Frame) -> None:
        kind = frame.kind
        if kind == BLOCK:
            shadow = self._shadows[peer].get(frame.conn_id)
            if shadow is not None:
                if frame.credit:
                    shadow.taken(frame.credit)
                shadow.deliver(frame.payload)
        elif kind == OUT or kind == OUT_ANSWERED:
            self._write_to_front(peer, frame)
        elif kind == OUT_TAKEN:
            shadow = self._shadows[peer].get(frame.conn_id)
            if shadow is not None:
                shadow.taken(frame.credit)
        elif kind == OPEN:
            self._open_shadow(peer, frame)
        elif kind == RESERVE:
            assert self._nursery is not None
            self._nursery.start_soon(self._hold_link, peer, frame.conn_id, frame.payload)
        elif kind == RESERVED:
            granted = self._reserving.get((peer, frame.conn_id, frame.payload))
            if granted is not None:
                granted.set()
        elif kind == RELEASE:
            released = self._held_for.get((peer, frame.conn_id, frame.payload))
            if released is not None:
                released.set()
        elif kind == CLOSE:
            shadow = self._shadows[peer].get(frame.conn_id)
            if shadow is not None:
                shadow.ended_by_front = True
                shadow.end()
        elif kind == GONE:
            front = self._fronts.get(frame.conn_id)
            if front is not None:
                front.conn.close_now(f"its shadow in worker {peer} ended")
        else:
            log.warning("worker %d sent a frame of unknown kind %d", peer, kind)

    def _write_to_front(self, peer: int, frame: Frame) -> None:
        front = self._fronts.get(frame.conn_id)
        if front is None:
            return
        conn = front.conn
        watch = conn.service_id is not None or bool(front.gathered)
        window = front.owner(peer)
        if window is None:
            return
        answered = before = window.answered
        hold_after = front.hold_after.get(peer) if front.hold_after else None
        forwarded = front.forwarded.get(peer) if front.forwarded else None
        out: list[bytes] = []
        held = False
        for t in _split(frame.payload):  # the shadow's transmissions (`ShadowTransport.pack`)
            if t == _PART_DONE:
                answered += 1
                continue
            if forwarded is not None and t.startswith(_FORWARDED):
                forwarded.append(_split(t[len(_FORWARDED):]))
                continue
            if watch:
                written = self._shadow_write(front, t)
                if written is None:
                    continue
                t = written
            if hold_after is not None and answered >= hold_after and front.held is not None:
                front.held.append(t)
                held = True
            else:
                out.append(t)
        collected = front.collected
        if out:
            if collected is None:
                conn.leave(out)  # in order with what came before; never waits
            else:
                collected.extend(out)
                front.collected_bytes += len(frame.payload)
                if front.collected_bytes > COLLECTED_BYTES and not front.collected_after:
                    # Bounded: the rest goes to the connection as it comes, behind these.
                    conn.leave(collected)
                    front.collected, front.collected_bytes = [], 0
        if answered != before:
            front.parts_answered(window, answered - before)
            if front.in_flight:
                self._settle(front)
        if frame.kind == OUT_ANSWERED:
            return  # outside the window: nothing to take back
        taken = Frame(OUT_TAKEN, frame.conn_id, b"", 1)
        assert self._nursery is not None
        if held and front.held_taken is not None:
            front.held_taken.append((peer, taken))  # a held walk waits within its window
        elif front.collected_after and out:
            # Writes that wait for the block's answers to be written wait within their
            # window.
            if front.collected_taken is None:
                front.collected_taken = []
            front.collected_taken.append((peer, taken))
        elif conn.outbox_full():
            self._stop_awaiting(conn)
            self._nursery.start_soon(self._taken_once_room, conn, peer, taken)
        else:
            window.taken += 1
            if window.taken >= TAKEN_TOLD_AT:
                taken.credit, window.taken = window.taken, 0
                if not self.links.send_nowait(peer, taken):
                    self._nursery.start_soon(self._send_quietly, peer, taken)

    async def _taken_once_room(self, conn: Connection, peer: int, taken: Frame) -> None:
        await conn.wait_for_room()
        await self._send_quietly(peer, taken)

    def _open_shadow(self, peer: int, frame: Frame) -> None:
        assert self._router is not None and self._shadow_serving is not None
        handshake, remote = decode_handshake(frame.payload)
        transport = ShadowTransport(self, peer, frame.conn_id, remote)
        self._shadows[peer][frame.conn_id] = transport
        transport.serve(self._router, handshake, self._shadow_serving)

    def shadow_gone(self, front_worker: int, front_id: int, transport: ShadowTransport) -> None:
        shadows = self._shadows[front_worker]
        if shadows.get(front_id) is transport:
            del shadows[front_id]

    def _on_peer_lost(self, peer: int) -> None:
        """A peer died (or its link broke): what depended on it ends."""
        for key in [key for key in self._held_for if key[0] == peer]:
            self._held_for.pop(key).set()
        for key in [key for key in self._reserving if key[0] == peer]:
            self._reserving.pop(key).set()  # the waiting front finds it gone
        for front in list(self._fronts.values()):
            owner = front.owner(peer)
            if owner is not None:
                owner.gone = True  # no CLOSE for it to the worker started in its place
                front.conn.close_now(f"its queues' worker {peer} is gone")
        for shadow in list(self._shadows[peer].values()):
            shadow.ended_by_front = True
            shadow.end()


class _LinkReservations:
    """The link ids this worker holds reserved as their owner: a contact NEW of one
    waits for the NEW of it before (docs/workers.md#a-contact-queues-link-id)."""

    def __init__(self) -> None:
        self._held: dict[bytes, tuple[trio.Lock, int]] = {}  # link id -> lock, its users

    @asynccontextmanager
    async def held(self, link_id: bytes) -> AsyncIterator[None]:
        lock, users = self._held.get(link_id, (None, 0))
        if lock is None:
            lock = trio.Lock()
        self._held[link_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[link_id]
            if users == 1:
                del self._held[link_id]
            else:
                self._held[link_id] = (lock, users - 1)


def _link_answer(answers: list[bytes], version: int) -> bytes:
    """An LGET / LKEY asked of every worker: the answer of the one that has the link
    (the others answer AUTH, as for no link). Two that have it (two NEWs of one link
    id at once in two workers) are answered AUTH: neither is the link's for sure."""
    found = [answer for answer in answers if _response(answer, version) != _NO_LINK]
    return found[0] if len(found) == 1 else answers[0] if not found else _no_link(
        found[0], version)


def _response(answer: bytes, version: int) -> Response:
    return decode_response(decode_transmission(answer, version).command, version)


def _no_link(answer: bytes, version: int) -> bytes:
    t = decode_transmission(answer, version)
    return error_transmission(t.corr_id, t.entity_id, AUTH, version)


_NO_LINK = ERR(AUTH)


# --- encodings ----------------------------------------------------------------------


def _join(parts: list[bytes]) -> bytes:
    """`parts`, each after its length (4 bytes): a shadow's write, forwarded
    transmissions and their answers (`_split` takes them apart)."""
    pieces = []
    for part in parts:
        pieces.append(len(part).to_bytes(4, "big"))
        pieces.append(part)
    return b"".join(pieces)


def _framed_size(transmissions: list[bytes]) -> int:
    """The bytes of `_join(transmissions)`."""
    return sum(map(len, transmissions)) + 4 * len(transmissions)


def _check_sizes(transmissions: list[bytes]) -> None:
    """Refuse, in the shadow, a transmission that no block holds, as packing it into a
    block would (`BatchPacker.add`): the front's packing of it would end the link."""
    longest = max(map(len, transmissions), default=0)
    if longest > MAX_TRANSMISSION_SIZE:
        raise ProtocolError(LARGE_MSG, f"transmission of {longest} bytes")


def _split_at_ping(transmissions: list[bytes], version: int
                   ) -> tuple[list[bytes], list[bytes] | None]:
    """The transmissions before the first PING, and that PING with those after it."""
    for i, raw in enumerate(transmissions):
        if not raw.endswith(b"PING"):  # a PING's command is all its transmission's end
            continue
        try:
            _, at = entity_and_command_offset(raw, version)
        except ProtocolError:
            continue
        if raw[at:at + 4] == b"PING":
            return transmissions[:i], transmissions[i:]
    return transmissions, None


def _whole(parts: dict[int, list[bytes]], block: bytes) -> bytes | None:
    """The block itself if it is all one other worker's: it goes as it came, not packed
    again."""
    return block if len(parts) == 1 else None


def _contents(transmissions: list[bytes]) -> list[bytes]:
    """`transmissions` in order in as few batches as the block's rule allows, each a
    batch's content without the padding (what a part to an owner is)."""
    packer = BatchPacker()
    contents: list[bytes] = []
    for t in transmissions:
        if not packer.add(t):
            contents.append(packer.take_content())
            packer.add(t)
    if len(packer):
        contents.append(packer.take_content())
    return contents


def _split(data: bytes) -> list[bytes]:
    """The parts of a `_join`."""
    parts = []
    pos, size = 0, len(data)
    while pos < size:
        start = pos + 4
        pos = start + _LENGTH(data, pos)[0]
        parts.append(data[start:pos])
    return parts


_LENGTH = struct.Struct(">I").unpack_from  # a part's length, read without a slice


_NONE = b"\xff\xff\xff\xff"


def _field(value: bytes | None) -> bytes:
    return _NONE if value is None else len(value).to_bytes(4, "big") + value


def encode_handshake(conn: Connection) -> bytes:
    """What an owner needs of a front's connection to verify and answer its commands."""
    service = conn.service
    # No client key: an RFWD, the one command it serves (its box key), is opened in the
    # front (`_LOCAL_TAGS`), and a shadow keeps what it is sent.
    fields = [conn.version.to_bytes(2, "big"), conn.session_id, None,
              conn.router_dh_private, conn.transport.remote.encode()]
    if service is not None:
        fields += [service.service_id, service.role, service.cert_hash, service.service_key]
    return b"".join(_field(f) for f in fields)


def decode_handshake(data: bytes) -> tuple[Handshake, str]:
    values: list[bytes | None] = []
    pos = 0
    while pos < len(data):
        head = data[pos:pos + 4]
        pos += 4
        if head == _NONE:
            values.append(None)
            continue
        n = int.from_bytes(head, "big")
        values.append(data[pos:pos + n])
        pos += n
    version, session_id, client_key, router_dh, remote = values[:5]
    assert version is not None and session_id is not None and remote is not None
    service = None
    if len(values) == 9:
        service_id, role, cert_hash, service_key = values[5:]
        assert service_id and role and cert_hash and service_key
        service = ServiceSession(service_id, role, cert_hash, service_key)
    handshake = Handshake(int.from_bytes(version, "big"), session_id, client_key, router_dh,
                          client_service=service)
    return handshake, remote.decode()


def group_of_supervisor(pid: int) -> str:
    """The name the workers of one supervisor share for their channel."""
    return hashlib.sha256(f"{pid}".encode()).hexdigest()[:16]
