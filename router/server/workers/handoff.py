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
not in the block's order among themselves.

Back-pressure: a front sends at most `WINDOW` blocks to a shadow that it has
not taken yet, and a shadow at most `WINDOW` writes the front has not taken; the
front takes a write once the real connection's pending list has room. So a
slow client holds its own shadows' writers, as it holds a connection's writer
in one process, and no worker's memory grows for it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field

import trio

from router.protocol.block import (
    decode_batch_content,
    encode_batches,
    iter_batch_content,
    unpad_block,
)
from router.protocol.codec import decode_command, decode_response, encode_response_transmission
from router.protocol.ids_hash import ids_hash_bytes, ids_hash_int
from router.protocol.transmission import decode_transmission
from router.protocol.types import NEW, SOKS, ProtocolError
from store.interfaces import Party

from ..core.connection import Connection
from ..core.ownership import ID_SIZE, Ownership
from ..core.services import all_received
from ..core.serving import ClientServing
from ..core.subscriptions import ClientSubscriptions
from ..edge.block_stream import TransportClosed
from ..edge.handshake import Handshake, ServiceSession
from ..router import Router
from .channel import Frame, LinkLost, Links

log = logging.getLogger(__name__)

OPEN, BLOCK, BLOCK_TAKEN, CLOSE, OUT, OUT_TAKEN, GONE = range(1, 8)
# Written by a shadow after a part's answers, in their stream: no real transmission
# is empty (router/protocol/transmission.py), and the front takes it out.
_PART_DONE = b""
# Begins a part of forwarded transmissions (RFWD, opened in the front) in a shadow's
# blocks, and each of their answers in its writes: a padded block begins with its
# content's length (below 0x40 00), and an answer with its empty authorization (0).
_FORWARDED = b"\xffFWD"
WINDOW = 4  # blocks (or writes) sent to the other side and not taken yet
OUT_FRAME_BYTES = 1 << 17  # a shadow's write goes back in frames of about this much at most
# Commands a front answers itself whatever their entity id: they name no queue
# (the proxy's, PING; an RFWD's inner transmission goes to its owner, below).
_LOCAL_TAGS = frozenset({b"PING", b"PRXY", b"PFWD", b"RFWD"})
# A service's subscriptions: its queues are in every worker, so every worker walks
# its own (docs/workers.md#service-subscriptions).
_SERVICE_TAGS = {b"SUBS": Party.RECIPIENT, b"NSUBS": Party.NOTIFIER}
_EVERY = -1  # the owner of a service subscription: every worker


@dataclass(slots=True)
class _Front:
    """A client connection of this worker and the owners it has shadows in."""

    conn: Connection
    client: ClientSubscriptions
    windows: dict[int, trio.Semaphore] = field(default_factory=dict)  # owner -> window
    sent: dict[int, int] = field(default_factory=dict)  # owner -> parts sent
    answered: dict[int, int] = field(default_factory=dict)  # owner -> parts answered
    # owner -> the answers to the forwarded transmissions of its part in progress
    forwarded: dict[int, list[list[bytes]]] = field(default_factory=dict)
    # A block's SUBS / NSUBS, by corrId: the other workers' answers, added into one SOKS.
    service_answers: dict[bytes, tuple[Party, list[bytes]]] = field(default_factory=dict)
    # owner -> its part of a block with SUBS: what it writes after the part's answers
    # (its walk) waits, with the frames' OUT_TAKEN, until the front's SOKS is written.
    hold_after: dict[int, int] = field(default_factory=dict)
    held: list[bytes] = field(default_factory=list)
    held_taken: list[tuple[int, Frame]] = field(default_factory=list)
    walks_left: int = 0  # the workers whose SUBS walk has not written its ALLS yet
    progress: trio.Event = field(default_factory=trio.Event)  # set as parts are answered

    async def wait_answered(self, owner: int, parts: int) -> None:
        while self.answered.get(owner, 0) < parts:
            await self.progress.wait()


@dataclass(frozen=True, slots=True)
class ShadowServing:
    """How a shadow is served: as any client, its answers to each part followed by
    the mark of their end."""

    own: ClientServing

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        if block.startswith(_FORWARDED):
            client.in_block = True  # as ClientServing.process_block
            answers = [_FORWARDED + _join(await self.own.dispatcher.run_forwarded(
                client, transmission[2:], int.from_bytes(transmission[:2], "big")))
                for transmission in _split(block[len(_FORWARDED):])]
        else:
            answers = await self.own.process_block(client, block)
        answers.append(_PART_DONE)
        return answers

    def delivery_loop(self, client: ClientSubscriptions) -> Awaitable[None]:
        return self.own.delivery_loop(client)

    def answered(self, client: ClientSubscriptions) -> None:
        self.own.answered(client)


class ShadowTransport:
    """A shadow's transport: blocks from its front, writes back to it as frames."""

    shadow = True  # not a client of this worker's own: no idle timeout (router.py)
    stalled = False
    web_challenge = None

    def __init__(self, handoff: Handoff, front_worker: int, front_id: int, remote: str) -> None:
        self.remote = remote
        self._handoff = handoff
        self._front_worker, self._front_id = front_worker, front_id
        self._blocks_in, self._blocks = trio.open_memory_channel[bytes](WINDOW)
        self._out_window = trio.Semaphore(WINDOW)
        self.scope: trio.CancelScope | None = None
        self.ended_by_front = False

    def deliver(self, block: bytes) -> None:
        """A block from the front (within its window, so never more than WINDOW)."""
        try:
            self._blocks_in.send_nowait(block)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.warning("worker %d overran its window to a shadow: ending it",
                        self._front_worker)
            self.end()

    def taken(self) -> None:
        self._out_window.release()

    def end(self) -> None:
        if self.scope is not None:
            self.scope.cancel()

    async def receive_block(self) -> bytes:
        try:
            block = await self._blocks.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as e:
            raise TransportClosed("the front ended") from e
        await self._send(Frame(BLOCK_TAKEN, self._front_id, b""))
        return block

    async def send_block(self, block: bytes) -> None:
        await self.send_blocks([block])

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """The blocks' contents in frames of at most OUT_FRAME_BYTES, each within the
        window (a write of a full pending list is many blocks)."""
        contents: list[bytes] = []
        size = 0
        for block in blocks:
            content = unpad_block(block)
            if contents and size + len(content) > OUT_FRAME_BYTES:
                await self._send_out(contents)
                contents, size = [], 0
            contents.append(content)
            size += 4 + len(content)
        if contents:
            await self._send_out(contents)

    async def _send_out(self, contents: list[bytes]) -> None:
        await self._out_window.acquire()
        await self._send(Frame(OUT, self._front_id, _join(contents)))

    async def _send(self, frame: Frame) -> None:
        try:
            await self._handoff.links.send(self._front_worker, frame)
        except LinkLost as e:
            raise TransportClosed(str(e)) from e

    def established(self) -> None:
        pass

    async def aclose(self, timeout: float) -> None:
        self._blocks_in.close()
        if not self.ended_by_front:
            with trio.move_on_after(timeout):
                try:
                    await self._handoff.links.send(self._front_worker,
                                                   Frame(GONE, self._front_id, b""))
                except LinkLost:
                    pass


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
        self._shadows: dict[tuple[int, int], ShadowTransport] = {}
        self._nursery: trio.Nursery | None = None

    def install(self, router: Router) -> None:
        """Serve `router`'s connections as fronts (before its listener accepts)."""
        self._router = router
        self._serving = router.install_serving(self)
        self._shadow_serving = ShadowServing(self._serving)
        router.dispatcher.route_forwarded(self)
        router.services.walk_done = self.own_walk_done

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.links.run)
            task_status.started()

    # --- the front: ClientHandler of this worker's own connections ----------------

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        assert self._serving is not None
        split = self._split(client.conn, block)
        if split is None:
            return await self._serving.process_block(client, block)
        parts, services = split
        own = parts.pop(self.ownership.index, None)
        front = self._front(client)
        if services:
            for corr_id, party in services.items():
                front.service_answers[corr_id] = (party, [])
            if Party.RECIPIENT in services.values():
                front.walks_left = self.ownership.workers
        awaited: dict[int, int] = {}
        for owner, transmissions in parts.items():
            for sub_block in encode_batches(transmissions):
                awaited[owner] = await self._hand_to(front, owner, sub_block)
            if services:
                front.hold_after[owner] = awaited[owner]
        answers: list[bytes] = []
        if own is not None:
            for own_block in encode_batches(own):
                answers.extend(await self._serving.process_block(client, own_block))
        for owner, count in awaited.items():
            await front.wait_answered(owner, count)
        if services:
            answers = [self._service_answer(front, answer) for answer in answers]
            front.service_answers.clear()
        return answers

    def delivery_loop(self, client: ClientSubscriptions):  # type: ignore[no-untyped-def]
        assert self._serving is not None
        return self._serving.delivery_loop(client)

    def answered(self, client: ClientSubscriptions) -> None:
        assert self._serving is not None and self._nursery is not None
        self._serving.answered(client)
        front = self._fronts.get(client.conn.id)
        if front is not None and front.hold_after:
            # The block's SOKS is written: the other workers' walks follow it.
            front.hold_after.clear()
            held, front.held = front.held, []
            if held:
                client.conn.leave(held)
            for peer, taken in front.held_taken:
                self._nursery.start_soon(self._taken_once_room, client.conn, peer, taken)
            front.held_taken.clear()

    def _split(self, conn: Connection, block: bytes
               ) -> tuple[dict[int, list[bytes]], dict[bytes, Party]] | None:
        """The block's transmissions by owner, and its service subscriptions (sent to
        every worker) by corrId; None if they are all this worker's (or the block does
        not parse: the dispatcher answers that)."""
        try:
            raws = decode_batch_content(unpad_block(block))
        except ProtocolError:
            return None
        version, service = conn.version, conn.service_id is not None
        owners = [self._owner(raw, version, service) for raw in raws]
        if all(owner == self.ownership.index for owner in owners):
            return None
        parts: dict[int, list[bytes]] = {}
        services: dict[bytes, Party] = {}
        for owner, raw in zip(owners, raws, strict=True):
            if owner != _EVERY:
                parts.setdefault(owner, []).append(raw)
                continue
            t = decode_transmission(raw, version)
            services[t.corr_id] = _SERVICE_TAGS[t.command.split(b" ", 1)[0]]
            for worker in range(self.ownership.workers):
                parts.setdefault(worker, []).append(raw)
        return parts, services

    def _owner(self, raw: bytes, version: int, service: bool) -> int:
        here = self.ownership.index
        try:
            t = decode_transmission(raw, version)
        except ProtocolError:
            return here  # answered with its error here
        tag = t.command.split(b" ", 1)[0]
        if tag in _LOCAL_TAGS:
            return here
        if tag in _SERVICE_TAGS:
            # A connection without a service is refused here; a repeated corrId would
            # mix the answers of two, so it goes no further either.
            return _EVERY if service and t.corr_id else here
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
            # The client chose the sender id: the queue is that id's owner's (docs/workers.md).
            return self.ownership.owner_of(cmd.link.sender_id)
        return here

    # --- forwarded transmissions (RFWD): forwarded.ForwardRoute --------------------

    def owner_elsewhere(self, transmission: bytes, version: int) -> int | None:
        try:
            entity_id = decode_transmission(transmission, version).entity_id
        except ProtocolError:
            return None  # answered with its error here
        if len(entity_id) != ID_SIZE:
            return None
        owner = self.ownership.owner_of(entity_id)
        return None if owner == self.ownership.index else owner

    async def run_elsewhere(self, client: ClientSubscriptions, owner: int,
                            forwarded: list[tuple[bytes, int]]) -> list[list[bytes]]:
        """One part to the owner's shadow of this client (through its window, as a
        block), each transmission with its version; its answers come back in the
        shadow's stream (`_write_to_front`)."""
        front = self._front(client)
        front.forwarded[owner] = answers = []
        part = _FORWARDED + _join([version.to_bytes(2, "big") + transmission
                                   for transmission, version in forwarded])
        await front.wait_answered(owner, await self._hand_to(front, owner, part))
        del front.forwarded[owner]
        if len(answers) != len(forwarded):  # a shadow answers each, or ends
            raise TransportClosed(f"worker {owner} answered {len(answers)} forwarded "
                                  f"transmissions of {len(forwarded)}")
        return answers

    # --- service subscriptions (SUBS, NSUBS): every worker walks its own queues ------

    def _service_answer(self, front: _Front, answer: bytes) -> bytes:
        """The front's own answer to a SUBS / NSUBS with the other workers' added: one
        SOKS with the sum of the counts and the XOR of the ids hashes (the hash of a
        union of disjoint sets), which the front's own holding keeps for its ENDS."""
        version = front.conn.version
        t = decode_transmission(answer, version)
        entry = front.service_answers.get(t.corr_id)
        if entry is None:
            return answer
        party, others = entry
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

    def _service_write(self, front: _Front, transmission: bytes) -> bytes | None:
        """What a shadow of a service's connection wrote, as the client gets it: its
        SOKS kept for the front's sum, its ENDS dropped (the front's own carries the
        router's figures), its ALLS only from the last walk; None if dropped."""
        try:
            t = decode_transmission(transmission, front.conn.version)
        except ProtocolError:
            return transmission
        command = t.command
        if command.startswith(b"ENDS "):
            return None
        if command == b"ALLS":
            return transmission if self._walk_ended(front) else None
        entry = front.service_answers.get(t.corr_id) if t.corr_id else None
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

    async def _hand_to(self, front: _Front, owner: int, block: bytes) -> int:
        """Send a part to the owner's shadow; its number among the parts sent there."""
        window = front.windows.get(owner)
        try:
            if window is None:
                window = front.windows[owner] = trio.Semaphore(WINDOW)
                await self.links.send(owner, Frame(OPEN, front.conn.id,
                                                   encode_handshake(front.conn)))
            await window.acquire()
            await self.links.send(owner, Frame(BLOCK, front.conn.id, block))
        except LinkLost as e:
            front.conn.close_now(f"its queues' worker {owner} cannot be reached: {e}")
            raise TransportClosed(str(e)) from e
        front.sent[owner] = sent = front.sent.get(owner, 0) + 1
        return sent

    def forget(self, conn: Connection) -> None:
        """A front connection ended: its shadows end too."""
        front = self._fronts.pop(conn.id, None)
        if front is None or self._nursery is None:
            return
        for owner in front.windows:
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
            shadow = self._shadows.get((peer, frame.conn_id))
            if shadow is not None:
                shadow.deliver(frame.payload)
        elif kind == OUT:
            self._write_to_front(peer, frame)
        elif kind == BLOCK_TAKEN:
            front = self._fronts.get(frame.conn_id)
            if front is not None and peer in front.windows:
                front.windows[peer].release()
        elif kind == OUT_TAKEN:
            shadow = self._shadows.get((peer, frame.conn_id))
            if shadow is not None:
                shadow.taken()
        elif kind == OPEN:
            self._open_shadow(peer, frame)
        elif kind == CLOSE:
            shadow = self._shadows.get((peer, frame.conn_id))
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
        service = conn.service_id is not None
        answered = before = front.answered.get(peer, 0)
        hold_after = front.hold_after.get(peer)
        forwarded = front.forwarded.get(peer)
        out: list[bytes] = []
        held = False
        for content in _split(frame.payload):
            for t in iter_batch_content(content):
                if t == _PART_DONE:
                    answered += 1
                    continue
                if forwarded is not None and t.startswith(_FORWARDED):
                    forwarded.append(list(_split(t[len(_FORWARDED):])))
                    continue
                if service:
                    written = self._service_write(front, t)
                    if written is None:
                        continue
                    t = written
                if hold_after is not None and answered >= hold_after:
                    front.held.append(t)
                    held = True
                else:
                    out.append(t)
        if out:
            conn.leave(out)  # in order with what came before; never waits
        if answered != before:
            front.answered[peer] = answered
            front.progress.set()
            front.progress = trio.Event()
        taken = Frame(OUT_TAKEN, frame.conn_id, b"")
        assert self._nursery is not None
        if held:
            front.held_taken.append((peer, taken))  # a held walk waits within its window
        elif conn.outbox_full():
            self._nursery.start_soon(self._taken_once_room, conn, peer, taken)
        else:
            self._nursery.start_soon(self._send_quietly, peer, taken)

    async def _taken_once_room(self, conn: Connection, peer: int, taken: Frame) -> None:
        await conn.wait_for_room()
        await self._send_quietly(peer, taken)

    def _open_shadow(self, peer: int, frame: Frame) -> None:
        assert self._router is not None and self._nursery is not None
        key = (peer, frame.conn_id)
        handshake, remote = decode_handshake(frame.payload)
        transport = ShadowTransport(self, peer, frame.conn_id, remote)
        self._shadows[key] = transport
        self._nursery.start_soon(self._serve_shadow, key, transport, handshake)

    async def _serve_shadow(self, key: tuple[int, int], transport: ShadowTransport,
                            handshake: Handshake) -> None:
        assert self._router is not None
        try:
            assert self._shadow_serving is not None
            await self._router.serve_shadow(transport, handshake, self._shadow_serving)
        finally:
            if self._shadows.get(key) is transport:
                del self._shadows[key]

    def _on_peer_lost(self, peer: int) -> None:
        """A peer died (or its link broke): what depended on it ends."""
        for front in list(self._fronts.values()):
            if peer in front.windows:
                front.conn.close_now(f"its queues' worker {peer} is gone")
        for (front_worker, _), shadow in list(self._shadows.items()):
            if front_worker == peer:
                shadow.ended_by_front = True
                shadow.end()


# --- encodings ----------------------------------------------------------------------


def _join(parts: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def _split(data: bytes) -> Iterator[bytes]:
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        yield data[pos + 4:pos + 4 + n]
        pos += 4 + n


_NONE = b"\xff\xff\xff\xff"


def _field(value: bytes | None) -> bytes:
    return _NONE if value is None else len(value).to_bytes(4, "big") + value


def encode_handshake(conn: Connection) -> bytes:
    """What an owner needs of a front's connection to verify and answer its commands."""
    service = conn.service
    fields = [conn.version.to_bytes(2, "big"), conn.session_id, conn.client_key,
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
