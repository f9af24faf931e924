"""The client's side of one SMP connection: correlation, reading and writing.

Theory of operation
-------------------
Two tasks serve a connection, and nothing else is spawned per command or per
message:

- the *writer* owns the outgoing side. Callers append encoded transmissions
  to an outbox and wake it; it packs everything waiting into as few blocks
  as fit (docs/protocol.md#blocks) and sends them, so a thousand commands issued together
  travel in a handful of blocks. It only sends a partly filled block when
  nothing more is waiting.
- the *reader* owns the incoming side. It decodes each block and routes every
  transmission (docs/protocol.md#transmissions): a non-empty corrId that a caller is waiting
  for resolves that caller; an empty corrId carrying a push (MSG, END, DELD,
  NMSG, ENDS, ALLS) becomes an event on a bounded channel, with MSG bodies
  decrypted by the queue's box key; everything else (ERR BLOCK, answers to
  raw blocks) goes to the raw channel.

A caller registers its corrIds in `_pending` before its transmissions are
queued, waits on one `trio.Event` for all of them, and reads its results in
order. When the connection fails or is closed, every waiting caller is woken
with the `ConnectionClosed` that ended it, so nobody hangs.

A MSG that answers SUB or ACK is a delivery (docs/protocol.md#reference-differences, #behaviour):
commands
sent with `route_msg` have such MSGs put on the event channel by the reader
itself, before the caller wakes, so a delivery is never lost to a cancelled
caller.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import trio

from router.protocol import crypto
from router.protocol.block import (
    BLOCK_SIZE,
    MAX_TRANSMISSION_SIZE,
    BatchPacker,
    decode_batch,
    decode_batch_content,
)
from router.protocol.block_encryption import MAX_CONTENT as MAX_SEALED_CONTENT
from router.protocol.block_encryption import BlockCipher
from router.protocol.codec import decode_response, encode_command
from router.protocol.transmission import (
    authorized_bytes,
    decode_transmission,
    encode_transmission,
)
from router.protocol.types import (
    ALLS,
    DELD,
    END,
    ENDS,
    ERR,
    LARGE_MSG,
    MSG,
    NEW,
    NMSG,
    NSUB,
    SUB,
    Command,
    ProtocolError,
    Response,
    Transmission,
)

from ._errors import BadResponse, ConnectionClosed
from ._service import ServiceSessionKeys
from ._transport import BlockTransport
from ._types import (
    AllReceivedEvent,
    ClientStatistics,
    DeletedEvent,
    EndEvent,
    Event,
    MessageEvent,
    NotificationEvent,
    NotifierCredentials,
    RawResponse,
    RecipientQueue,
    ServiceEndEvent,
    UndecryptedMessageEvent,
)

# One request: entity id, command (a value, or bytes sent as they are), and the
# Ed25519 seed that signs it (None: no authorization).
Request = tuple[bytes, Command | bytes, bytes | None]
Result = Response | BadResponse

RAW_BUFFER = 1024
# Requests signed and queued between two checkpoints of a large `request`.
SUBMIT_CHUNK = 2048


class _Waiter:
    """The results of one call's transmissions, and one event for all of them."""

    __slots__ = ("results", "remaining", "done", "error")

    def __init__(self, size: int) -> None:
        self.results: list[Result | None] = [None] * size
        self.remaining = size
        self.done = trio.Event()
        self.error: ConnectionClosed | None = None

    def resolve(self, index: int, result: Result) -> None:
        self.results[index] = result
        self.remaining -= 1
        if not self.remaining:
            self.done.set()


_SERVICE_SIGNED = (NEW, SUB, NSUB)  # what a service session signs with its session key too


class Connection:
    """Correlates commands and responses over one handshaken transport."""

    def __init__(
        self,
        transport: BlockTransport,
        version: int,
        session_id: bytes,
        event_buffer: float = math.inf,
        cipher: BlockCipher | None = None,
    ) -> None:
        self.version = version
        self.session_id = session_id
        # A service session's keys (docs/protocol.md#service-signature): set by open_client.
        self.service: ServiceSessionKeys | None = None
        # Block encryption from v11 (docs/protocol.md#block-encryption): every block
        # after the hellos, both ways.
        self._cipher = cipher
        self.queues: dict[bytes, RecipientQueue] = {}
        self.notifiers: dict[bytes, NotifierCredentials] = {}
        self._transport = transport
        self._pending: dict[bytes, tuple[_Waiter, int, bool]] = {}
        self._outbox: list[bytes] = []
        self._wake = trio.Event()
        self._events_send, self._events_recv = trio.open_memory_channel[Event](event_buffer)
        self._raw_send, self._raw_recv = trio.open_memory_channel[RawResponse](RAW_BUFFER)
        self._closed: ConnectionClosed | None = None
        self._scope = trio.CancelScope()
        # corrIds only need to be unique on this connection: a random prefix and
        # a counter are, without a system call per command.
        self._corr_prefix = os.urandom(16)
        self._corr_next = 0
        self._blocks_sent = 0
        self._blocks_received = 0

    # --- lifecycle -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the reader and the writer until the connection ends."""
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reader)
                nursery.start_soon(self._writer)
                task_status.started()

    @property
    def closed(self) -> ConnectionClosed | None:
        """Why the connection ended, or None while it is open."""
        return self._closed

    async def aclose(self) -> None:
        """Stop both tasks, fail waiting callers, close the socket. Idempotent."""
        self.fail(ConnectionClosed("connection closed by the client", local=True))
        await self._transport.aclose()

    def fail(self, error: ConnectionClosed) -> None:
        """End the connection with `error`, which every waiting caller receives."""
        if self._closed is not None:
            return
        self._closed = error
        self._scope.cancel()
        waiters = {entry[0] for entry in self._pending.values()}
        self._pending.clear()
        for waiter in waiters:
            waiter.error = error
            waiter.done.set()
        self._events_send.close()
        self._raw_send.close()

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(
            pending_commands=len(self._pending),
            queued_transmissions=len(self._outbox),
            events_waiting=self._events_recv.statistics().current_buffer_used,
            blocks_sent=self._blocks_sent,
            blocks_received=self._blocks_received,
        )

    # --- requests ------------------------------------------------------------

    async def request(
        self, requests: Sequence[Request], route_msg: bool = False,
        corr_id: bytes | None = None,
    ) -> list[Result]:
        """Send `requests` (packed with whatever else is waiting) and return their results;
        `corr_id`, for one request, is the corrId it goes with (one not pending already)."""
        if self._closed is not None:
            raise self._closed
        if corr_id is not None and (len(requests) != 1 or corr_id in self._pending):
            raise ValueError("a chosen corrId is for one request, not one pending already")
        waiter = _Waiter(len(requests))
        if not requests:
            return []
        for start in range(0, len(requests), SUBMIT_CHUNK):
            if start:
                # Signing is CPU work: let the writer and reader run between chunks,
                # so the router already works on the first commands.
                await trio.lowlevel.checkpoint()
                if self._closed is not None:
                    raise self._closed
            self._submit(waiter, requests, start, route_msg, corr_id)
        await waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.results  # type: ignore[return-value]  # all filled once done

    def _submit(
        self, waiter: _Waiter, requests: Sequence[Request], start: int, route_msg: bool,
        chosen_corr_id: bytes | None = None,
    ) -> None:
        pending, outbox = self._pending, self._outbox
        for index in range(start, min(start + SUBMIT_CHUNK, len(requests))):
            entity_id, cmd, seed = requests[index]
            corr_id = chosen_corr_id or self._new_corr_id()
            data = self._encode(corr_id, entity_id, cmd, seed)
            if len(data) > MAX_TRANSMISSION_SIZE:
                # The reference sender's rule (docs/protocol.md#blocks): never sent, reported
                # locally.
                waiter.resolve(index, ERR(LARGE_MSG))
                continue
            pending[corr_id] = (waiter, index, route_msg)
            outbox.append(data)
        self._wake.set()

    def _new_corr_id(self) -> bytes:
        n = self._corr_next
        self._corr_next = n + 1
        return self._corr_prefix + n.to_bytes(8, "big")

    def _encode(
        self, corr_id: bytes, entity_id: bytes, cmd: Command | bytes, seed: bytes | None
    ) -> bytes:
        command = cmd if isinstance(cmd, bytes) else encode_command(cmd, self.version)
        auth, service_sig = b"", None
        if seed is not None:
            service = self.service
            if service is not None and type(cmd) in _SERVICE_SIGNED:
                # docs/protocol.md#service-signature: the queue key signs the certificate
                # hash first; the session key signs the transmission itself.
                signed = authorized_bytes(self.session_id, corr_id, entity_id, command)
                auth = crypto.sign(seed, service.cert_hash + signed)
                service_sig = crypto.sign(service.session_seed, signed)
            else:
                auth = crypto.authorize(seed, self.session_id, corr_id, entity_id, command)
        return encode_transmission(
            Transmission(auth, corr_id, entity_id, command, service_sig), self.version
        )

    async def send_raw_block(self, block: bytes) -> None:
        """Send `block` as one WebSocket message (for malformed-input tests). On an
        encrypted connection a well-formed padded block is sealed, so that its content
        reaches the router's parser; anything else goes out as it is."""
        if self._closed is not None:
            raise self._closed
        if self._cipher is not None and len(block) == BLOCK_SIZE:
            length = int.from_bytes(block[:2], "big")
            if length <= MAX_SEALED_CONTENT:
                block = self._cipher.seal(block[2 : 2 + length])
        await self._transport.send_block(block)

    def _seal(self, packer: BatchPacker) -> bytes:
        if self._cipher is None:
            return packer.take_block()
        return self._cipher.seal(packer.take_content())

    async def websocket_ping(self) -> None:
        if self._closed is not None:
            raise self._closed
        await self._transport.ping()

    # --- events and raw responses ---------------------------------------------

    async def next_event(self) -> Event:
        try:
            return await self._events_recv.receive()
        except trio.EndOfChannel:
            raise self._closed from None  # type: ignore[misc]  # set before the channel closes

    def next_event_nowait(self) -> Event | None:
        try:
            return self._events_recv.receive_nowait()
        except trio.WouldBlock:
            return None
        except trio.EndOfChannel:
            raise self._closed from None  # type: ignore[misc]

    async def next_raw(self) -> RawResponse:
        try:
            return await self._raw_recv.receive()
        except trio.EndOfChannel:
            raise self._closed from None  # type: ignore[misc]

    # --- writer --------------------------------------------------------------

    async def _writer(self) -> None:
        try:
            await self._write_loop()
        except ConnectionClosed as e:
            self.fail(e)

    async def _write_loop(self) -> None:
        packer = BatchPacker()
        send_block = self._transport.send_block
        while True:
            if not self._outbox:
                if len(packer):
                    # Nothing else waiting: a partly filled block goes now.
                    self._blocks_sent += 1
                    await send_block(self._seal(packer))
                    continue
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            waiting, self._outbox = self._outbox, []
            for data in waiting:
                if not packer.add(data):
                    self._blocks_sent += 1
                    await send_block(self._seal(packer))
                    packer.add(data)

    # --- reader --------------------------------------------------------------

    async def _reader(self) -> None:
        try:
            await self._read_loop()
        except ConnectionClosed as e:
            self.fail(e)

    async def _read_loop(self) -> None:
        receive_block = self._transport.receive_block
        while True:
            block = await receive_block()
            self._blocks_received += 1
            try:
                if self._cipher is None:
                    batch = decode_batch(block)
                else:
                    batch = decode_batch_content(self._cipher.open(block))
                transmissions = [decode_transmission(t, self.version) for t in batch]
            except ProtocolError as e:
                # Callers whose answers were in this block would wait forever.
                raise ConnectionClosed(f"router sent a bad block: {e}") from e
            for t in transmissions:
                await self._route(t)

    async def _route(self, t: Transmission) -> None:
        corr_id = t.corr_id
        if corr_id:
            entry = self._pending.pop(corr_id, None)
            if entry is not None:
                await self._resolve(entry, t)
                return
        response = _decode(t.command, self.version)
        if not corr_id and response is not None:
            event = self._push_event(t.entity_id, response)
            if event is not None:
                await self._emit(event)
                return
        self._put_raw(RawResponse(corr_id, t.entity_id, t.command, response))

    async def _resolve(self, entry: tuple[_Waiter, int, bool], t: Transmission) -> None:
        waiter, index, route_msg = entry
        response = _decode(t.command, self.version)
        if response is None:
            waiter.resolve(index, BadResponse(f"unparsable response {t.command[:16]!r}"))
            return
        try:
            if route_msg and type(response) is MSG:
                await self._emit(self.message_event(t.entity_id, response))
        finally:
            # Even when cancelled mid-emit: this caller is no longer in `_pending`.
            waiter.resolve(index, response)

    def _push_event(self, entity_id: bytes, response: Response) -> Event | None:
        kind = type(response)
        if kind is MSG:
            return self.message_event(entity_id, response)  # type: ignore[arg-type]
        if kind is END:
            return EndEvent(entity_id)
        if kind is DELD:
            return DeletedEvent(entity_id)
        if kind is NMSG:
            return self._notification_event(entity_id, response)  # type: ignore[arg-type]
        if kind is ENDS:
            return ServiceEndEvent(entity_id, response.count)  # type: ignore[union-attr]
        if kind is ALLS:
            return AllReceivedEvent()
        return None

    def message_event(
        self, recipient_id: bytes, msg: MSG
    ) -> MessageEvent | UndecryptedMessageEvent:
        """Open `msg` with the box key of its queue, if this client knows the queue."""
        queue = self.queues.get(recipient_id)
        if queue is None:
            return UndecryptedMessageEvent(recipient_id, msg.msg_id, msg.enc_body)
        try:
            body = crypto.decrypt_msg_body(queue.box_key, msg.msg_id, msg.enc_body)
        except ProtocolError:
            return UndecryptedMessageEvent(recipient_id, msg.msg_id, msg.enc_body)
        return MessageEvent(recipient_id, msg.msg_id, body.ts, body.flags, body.body, body.quota)

    def _notification_event(self, notifier_id: bytes, nmsg: NMSG) -> NotificationEvent:
        creds = self.notifiers.get(notifier_id)
        if creds is not None:
            try:
                msg_id, ts = crypto.decrypt_ntf_meta(creds.ntf_box_key, nmsg.nonce, nmsg.enc_meta)
            except ProtocolError:
                pass  # handed on sealed, as to a notifier that does not hold the key
            else:
                return NotificationEvent(notifier_id, nmsg.nonce, nmsg.enc_meta, msg_id, ts)
        return NotificationEvent(notifier_id, nmsg.nonce, nmsg.enc_meta)

    async def _emit(self, event: Event) -> None:
        # No scheduler round trip per event while the channel has room.
        try:
            self._events_send.send_nowait(event)
        except trio.WouldBlock:
            try:
                await self._events_send.send(event)
            except trio.ClosedResourceError:
                pass  # the connection is ending; nobody will read it
        except trio.ClosedResourceError:
            pass

    def _put_raw(self, raw: RawResponse) -> None:
        try:
            self._raw_send.send_nowait(raw)
        except (trio.WouldBlock, trio.ClosedResourceError):
            pass  # nobody reads raw responses: keep the reader going, drop the newest


def _decode(command: bytes, version: int) -> Response | None:
    try:
        return decode_response(command, version)
    except ProtocolError:
        return None
