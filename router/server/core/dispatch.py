"""From a received block to the responses it gets (docs/protocol.md#blocks, #transmissions,
#behaviour).

Theory of operation. A block is answered in two passes, as the reference
router does:

1. every transmission is parsed, its credentials checked (docs/protocol.md#credentials) and its
   authorization verified against the queue it names (docs/protocol.md#authorization, #behaviour
   "AUTH
   timing"); failures become `ERR` transmissions right away;
2. the verified commands run in order, each producing its responses.

The block's answer is the pass-1 errors followed by the pass-2 responses, in
order, handed to the connection's outbox as one batch.

A block of many subscriptions (more than `HEAVY_BLOCK` SUBs or NSUBs) waits
for one of `HEAVY_AT_ONCE` places before any signature is checked. Trio runs
every ready task once per pass of its scheduler, and such a block is
milliseconds of signature checks: when thousands of clients reconnect and
resubscribe at once, an unbounded pass would take seconds, and every client's
SEND or ACK would wait as long. Other blocks never wait for a place, so the
traffic of clients already subscribed keeps flowing whatever the crowd does,
and the crowd is served in arrival order. While a block waits, only its bytes
are kept (which the connection holds anyway): its transmissions are taken
apart again when its turn comes, since a crowd of 20,000 blocks parked parsed
would be half a gigabyte. A block that does not
parse at all gets one `ERR BLOCK` with empty corrId and entity id. A bug in a
handler is logged and answered `ERR INTERNAL`; it never reaches the
connection, let alone the router.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING

import trio

from router.protocol.block import decode_batch
from router.protocol.codec import check_credentials, decode_command, encode_command
from router.protocol.crypto import verify_authorization
from router.protocol.transmission import (
    authorized_bytes,
    check_auth_length,
    command_offset,
    decode_transmission,
)
from router.protocol.types import (
    AUTH,
    BLOCK,
    INTERNAL,
    LGET,
    LKEY,
    NEW,
    NSUB,
    NSUBS,
    PFWD,
    PING,
    PRXY,
    SEND,
    SERVICE,
    SKEY,
    SUB,
    SUBS,
    Command,
    ErrorType,
    ProtocolError,
    Transmission,
)
from router.protocol.versions import LEGACY_VERSION
from store.interfaces import Party, QueueRecord, QueueStore, StoreError

from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from .connection import Connection
    from .latency import Latencies
    from .subscriptions import ClientSubscriptions

log = logging.getLogger(__name__)

# Commands that touch no queue, so there is nothing to verify them against.
_UNVERIFIED = (PING, PRXY, PFWD)
# Commands of the service extension: verified against the service key of the hello.
_SERVICE = (SUBS, NSUBS)

# The commands a block of many is made to take turns for, as they are on the wire.
_SUBSCRIBING = frozenset({encode_command(SUB()), encode_command(NSUB())})

# Runs one verified command for its subscriber (commands.py).
Execute = Callable[["ClientSubscriptions", Verified], Awaitable[list[bytes]]]


_BAD_BLOCK = [error_transmission(b"", b"", BLOCK)]

HEAVY_BLOCK = 8  # a block of more subscriptions than this waits for a place
HEAVY_AT_ONCE = 4  # heavy blocks worked on at a time, router-wide


class Dispatcher:
    __slots__ = ("_queues", "_execute_command", "_heavy", "_latencies")

    def __init__(self, queues: QueueStore, execute: Execute, latencies: Latencies) -> None:
        self._queues = queues
        self._execute_command = execute
        self._latencies = latencies
        self._heavy = trio.CapacityLimiter(HEAVY_AT_ONCE)

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        try:
            raw_transmissions = decode_batch(block)
        except ProtocolError:
            return list(_BAD_BLOCK)
        if not _many_subscriptions(raw_transmissions, client.conn.version):
            return await self._answer(client, raw_transmissions)
        del raw_transmissions
        async with self._heavy:
            return await self._answer(client, decode_batch(block))

    async def _answer(
        self, client: ClientSubscriptions, raw_transmissions: list[bytes]
    ) -> list[bytes]:
        conn = client.conn
        out: list[bytes] = []
        verified: list[tuple[Verified, float]] = []  # with the time its verification took
        for raw in raw_transmissions:
            started = perf_counter()
            result = await self._verify_guarded(conn, raw)
            if isinstance(result, Verified):
                verified.append((result, perf_counter() - started))
            else:
                out.append(result)
        observe = self._latencies.command
        for v, verifying in verified:
            started = perf_counter()
            out.extend(await self._execute(client, v))
            observe(type(v.command).__name__, verifying + perf_counter() - started)
        return out

    async def _verify_guarded(self, conn: Connection, raw: bytes) -> Verified | bytes:
        try:
            return await self._verify(conn, raw)
        except StoreError as e:  # the queue lookup failed: answer what the store says
            log.warning("queue lookup for %r failed: %s", conn, e)
            return error_transmission(b"", b"", e.error)
        except Exception:
            log.exception("verifying a transmission from %r failed", conn)
            return error_transmission(b"", b"", INTERNAL)

    async def _execute(self, client: ClientSubscriptions, v: Verified) -> list[bytes]:
        conn = client.conn
        try:
            return await self._execute_command(client, v)
        except ProtocolError as e:
            return [error_transmission(v.corr_id, v.entity_id, e.error, v.version)]
        except StoreError as e:  # disk full, I/O error: not stored, never OK
            log.warning("%s from %r failed in the store: %s", type(v.command).__name__, conn, e)
            return [error_transmission(v.corr_id, v.entity_id, e.error, v.version)]
        except Exception:
            log.exception("%s from %r failed", type(v.command).__name__, conn)
            return [error_transmission(v.corr_id, v.entity_id, INTERNAL)]

    async def _verify(self, conn: Connection, raw: bytes) -> Verified | bytes:
        version = conn.version
        try:
            t = decode_transmission(raw, version)
        except ProtocolError as e:
            return error_transmission(b"", b"", e.error, version)
        cmd = _parse(t, version)
        if isinstance(cmd, ErrorType):
            return error_transmission(t.corr_id, t.entity_id, cmd, version)
        if t.service_sig is not None:
            # The reference's service signatures need its client services, which this
            # router does not accept (docs/protocol.md#service-signature).
            return error_transmission(t.corr_id, t.entity_id, SERVICE, version)
        result = await self._authorize(conn, t, cmd)
        if isinstance(result, ErrorType):
            return error_transmission(t.corr_id, t.entity_id, result, version)
        return result

    async def _authorize(
        self, conn: Connection, t: Transmission, cmd: Command
    ) -> Verified | ErrorType:
        """Look the queue up by the party the command speaks for and check the signature.

        Whatever is missing, one verification of the kind the authorization claims
        still runs (`verify_authorization` uses a dummy key), so the answer time does
        not reveal which queues or keys exist (docs/protocol.md#behaviour).
        """
        kind = type(cmd)
        version = conn.version
        if kind in _UNVERIFIED:
            return Verified(t.corr_id, t.entity_id, cmd, None, version)
        queues = self._queues
        if kind is LGET:
            # Unsigned: the link id is the capability (docs/protocol.md#short-links).
            queue = await queues.get_queue(Party.LINK, t.entity_id)
            return Verified(t.corr_id, t.entity_id, cmd, queue, version)
        if kind is NEW:
            key, queue = cmd.rcv_auth_key, None  # type: ignore[union-attr]
        elif kind is SEND:
            queue = await queues.get_queue(Party.SENDER, t.entity_id)
            if queue is not None and queue.sender_key is None and not t.authorization:
                return Verified(t.corr_id, t.entity_id, cmd, queue, version)  # unsecured queue
            if not t.authorization:
                return AUTH
            key = None if queue is None else queue.sender_key
        elif kind is SKEY:
            queue = await queues.get_queue(Party.SENDER, t.entity_id)
            key = _skey_key(queue, cmd.sender_key)  # type: ignore[union-attr]
        elif kind is NSUB:
            queue = await queues.get_queue(Party.NOTIFIER, t.entity_id)
            key = None if queue is None or queue.notifier is None else queue.notifier.notifier_key
        elif kind in _SERVICE:
            key, queue = _service_key(conn, t.entity_id), None
        elif kind is LKEY:
            queue = await queues.get_queue(Party.LINK, t.entity_id)
            key = _skey_key(queue, cmd.sender_key)  # type: ignore[union-attr]
        else:
            queue = await queues.get_queue(Party.RECIPIENT, t.entity_id)
            key = None if queue is None else queue.recipient_key
        signed = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
        verified = verify_authorization(
            t.authorization, key, signed, corr_id=t.corr_id,
            router_dh_private=conn.router_dh_private,
        )
        if not verified or key is None:
            return SERVICE if kind in _SERVICE and conn.service is None else AUTH
        return Verified(t.corr_id, t.entity_id, cmd, queue, version)


def _many_subscriptions(raw_transmissions: list[bytes], version: int = LEGACY_VERSION) -> bool:
    """More than `HEAVY_BLOCK` of the transmissions are SUB or NSUB (neither has
    parameters). A smaller block is not looked into (a SEND costs nothing more),
    and a block of SUBs is told after `HEAVY_BLOCK` + 1 of them: when a crowd's
    blocks arrive in one pass of the scheduler, this runs for each."""
    if len(raw_transmissions) <= HEAVY_BLOCK:
        return False
    count = 0
    for raw in raw_transmissions:
        try:
            count += raw[command_offset(raw, version):] in _SUBSCRIBING
        except ProtocolError:
            continue  # answered with its error in its turn
        if count > HEAVY_BLOCK:
            return True
    return False


def _parse(t: Transmission, version: int) -> Command | ErrorType:
    """The command, or the error for its authorization length, tag, syntax or credentials."""
    error = check_auth_length(t.authorization)
    if error is not None:
        return error
    try:
        cmd = decode_command(t.command, version)
    except ProtocolError as e:
        return e.error
    return check_credentials(cmd, t) or cmd


def _service_key(conn: Connection, entity_id: bytes) -> bytes | None:
    """SUBS / NSUBS name the service proven in this connection's hello and are
    signed with its key (docs/protocol.md, "Service subscriptions")."""
    if conn.service is None or entity_id != conn.service_id:
        return None
    return conn.service.service_key


def _skey_key(queue: QueueRecord | None, new_key: bytes) -> bytes | None:
    """SKEY is signed with the key it installs, and only on sndSecure queues whose
    sender key is unset or the same (docs/protocol.md#behaviour)."""
    if queue is None or not queue.snd_secure:
        return None
    if queue.sender_key is not None and queue.sender_key != new_key:
        return None
    return new_key
