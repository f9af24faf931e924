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
order, written by the connection as one batch (a costly block's in parts,
below).

Work on a block yields by its cost, not by its command (turns.py): a block
costing more than `FREE_COST` waits for one of the router's places for costly
blocks before any signature is checked (holding only its content, unpadded), and, in
either pass, pauses between two transmissions once it has spent a turn's
budget, letting the other blocks waiting and the scheduler's other tasks run.
A block that is mostly ACKs of messages in flight to its connection needs no
place: it pauses in the same way, after every `FREE_COST` of work (`Slices`).
The answers keep their order across the pauses: a pause in pass 2 first writes
the answers made so far (or leaves them pending), if one of them is an answer a
push could overtake (SUB, NSUB, NEW with subMode S, ACK, GET; without holding a
place while the connection's pending list is full), so that a push the pause lets in (a MSG for a
queue the block has just subscribed) follows them; the rest are returned at
the end. The
block's END/DELD events still wait for all of them (serving.py).

A block that does not parse at all gets one `ERR BLOCK` with empty corrId and
entity id. A bug in a handler is logged and answered `ERR INTERNAL`; it never
reaches the connection, let alone the router.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from router.protocol.block import decode_batch_content, unpad_block
from router.protocol.codec import check_credentials, decode_command
from router.protocol.crypto import verify_authorization
from router.protocol.transmission import (
    authorized_bytes,
    check_auth_length,
    decode_transmission,
)
from router.protocol.types import (
    ACK,
    AUTH,
    BLOCK,
    CMD_PROHIBITED,
    GET,
    INTERNAL,
    LGET,
    LKEY,
    NEW,
    NSUB,
    NSUBS,
    PFWD,
    PING,
    PRXY,
    RFWD,
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
from store.interfaces import Party, QueueRecord, QueueStore, StoreError

from .counters import Counters
from .forwarded import Forwarded
from .turns import (
    FREE_COST,
    Pacing,
    Slices,
    Turns,
    acknowledging_cost,
    block_cost,
    execution_cost,
    verification_cost,
)
from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from .connection import Connection
    from .latency import Latencies
    from .subscriptions import ClientSubscriptions

log = logging.getLogger(__name__)

# Commands that touch no queue, so there is nothing to verify them against.
_UNVERIFIED = (PING, PRXY, PFWD, RFWD)
# What a proxy may forward: a sender's commands (docs/protocol.md#private-message-routing).
_FORWARDABLE = (SEND, SKEY, LKEY, LGET)
# Commands of the service extension: verified against the service key of the hello.
_SERVICE = (SUBS, NSUBS)
# Commands whose answer a push for the same queue may follow (`_may_be_overtaken`).
_OVERTAKABLE = frozenset({SUB, NSUB, ACK, GET, SUBS, NSUBS})

# Runs one verified command for its subscriber (commands.py).
Execute = Callable[["ClientSubscriptions", Verified], Awaitable[list[bytes]]]
ClientAwaitsAck = Callable[["ClientSubscriptions", bytes, bytes], bool]


_BAD_BLOCK = [error_transmission(b"", b"", BLOCK)]

class Dispatcher:
    __slots__ = ("_queues", "_execute_command", "turns", "_latencies", "_forwarded",
                 "_awaits_ack")

    def __init__(
        self, queues: QueueStore, execute: Execute, latencies: Latencies,
        turns: Turns | None = None, counters: Counters | None = None,
        awaits_ack: ClientAwaitsAck = lambda client, recipient_id, msg_id: False,
    ) -> None:
        self._queues = queues
        self._execute_command = execute
        self._latencies = latencies
        self.turns = turns or Turns()
        # Whether an ACK is of the message in flight to that client (subscriptions.py).
        self._awaits_ack = awaits_ack
        # RFWD: a transmission inside a command, verified and run as this block's are.
        self._forwarded = Forwarded(counters or Counters(), self.verify_forwarded,
                                    self._execute)

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        try:
            content = unpad_block(block)
            raw_transmissions = decode_batch_content(content)
        except ProtocolError:
            return list(_BAD_BLOCK)
        # Parked as its content until its turn, without the block's padding: when a
        # wave of clients sends SUB blocks at once, each waiting block is its content
        # (a few hundred bytes per command), not 16 KB (bench/RESULTS.md, the storm).
        del block
        version = client.conn.version
        cost = block_cost(raw_transmissions, version)
        if cost <= FREE_COST:
            return await self._answer(client, raw_transmissions, None)
        acknowledging = acknowledging_cost(raw_transmissions, version,
                                           partial(self._awaits_ack, client))
        if cost - acknowledging <= FREE_COST:
            return await self._answer(client, raw_transmissions, Slices())
        del raw_transmissions  # parked as bytes until its turn
        turn = self.turns.turn()
        try:
            await turn.begin()
            return await self._answer(client, decode_batch_content(content), turn)
        finally:
            turn.finish()

    async def _answer(
        self, client: ClientSubscriptions, raw_transmissions: list[bytes], turn: Pacing | None
    ) -> list[bytes]:
        """Both passes; with a `turn`, each piece of work is paid for before it is done."""
        conn = client.conn
        out: list[bytes] = []
        verified: list[tuple[Verified, float]] = []  # with the time its verification took
        for raw in raw_transmissions:
            if turn is not None:
                await turn.spend(verification_cost(raw))
            started = perf_counter()
            result = await self._verify_guarded(conn, raw)
            if isinstance(result, Verified):
                verified.append((result, perf_counter() - started))
            else:
                out.append(result)
        del raw_transmissions
        observe = self._latencies.command
        overtakable = False  # an answer in `out` that a push could overtake
        for v, verifying in verified:
            if turn is not None:
                if turn.due:
                    turn.end()
                    if overtakable:
                        # The answers so far leave before anything the pause lets in: a
                        # MSG pushed meanwhile for a queue this block subscribed comes
                        # after its OK (docs/architecture.md, "Ordering").
                        if conn.push_may_wait():
                            turn.step_aside()  # a slow reader holds up no other block
                        await conn.push(out)
                        out, overtakable = [], False
                    await turn.begin()
                turn.charge(execution_cost(type(v.command).__name__))
                overtakable = overtakable or _may_be_overtaken(v.command)
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
            if type(v.command) is RFWD:
                return await self._forwarded.answer(client, v)
            return await self._execute_command(client, v)
        except ProtocolError as e:
            return [error_transmission(v.corr_id, v.entity_id, e.error, v.version)]
        except StoreError as e:  # disk full, I/O error: not stored, never OK
            log.warning("%s from %r failed in the store: %s", type(v.command).__name__, conn, e)
            return [error_transmission(v.corr_id, v.entity_id, e.error, v.version)]
        except Exception:
            log.exception("%s from %r failed", type(v.command).__name__, conn)
            return [error_transmission(v.corr_id, v.entity_id, INTERNAL)]

    async def verify_forwarded(self, conn: Connection, raw: bytes, version: int
                               ) -> Verified | bytes:
        """A transmission a proxy forwarded on `conn` (forwarded.py), at the version its
        client encoded it at; only a sender's commands pass."""
        try:
            return await self._verify(conn, raw, version, _FORWARDABLE)
        except StoreError as e:
            log.warning("queue lookup for a transmission forwarded by %r failed: %s", conn, e)
            return error_transmission(b"", b"", e.error, version)

    async def _verify(
        self, conn: Connection, raw: bytes, version: int | None = None,
        allowed: tuple[type, ...] | None = None,
    ) -> Verified | bytes:
        if version is None:
            version = conn.version
        try:
            t = decode_transmission(raw, version)
        except ProtocolError as e:
            return error_transmission(b"", b"", e.error, version)
        cmd = _parse(t, version)
        if isinstance(cmd, ErrorType):
            return error_transmission(t.corr_id, t.entity_id, cmd, version)
        if allowed is not None and type(cmd) not in allowed:
            return error_transmission(t.corr_id, t.entity_id, CMD_PROHIBITED, version)
        if t.service_sig is not None:
            # The reference's service signatures need its client services, which this
            # router does not accept (docs/protocol.md#service-signature).
            return error_transmission(t.corr_id, t.entity_id, SERVICE, version)
        result = await self._authorize(conn, t, cmd, version)
        if isinstance(result, ErrorType):
            return error_transmission(t.corr_id, t.entity_id, result, version)
        return result

    async def _authorize(
        self, conn: Connection, t: Transmission, cmd: Command, version: int
    ) -> Verified | ErrorType:
        """Look the queue up by the party the command speaks for and check the signature.

        Whatever is missing, one verification of the kind the authorization claims
        still runs (`verify_authorization` uses a dummy key), so the answer time does
        not reveal which queues or keys exist (docs/protocol.md#behaviour).
        """
        kind = type(cmd)
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


def _may_be_overtaken(cmd: Command) -> bool:
    """After its answer, a push may come for what it names: SUB, NSUB and NEW with
    subMode S subscribe, ACK and GET free the queue's one message in flight."""
    kind = type(cmd)
    return kind in _OVERTAKABLE or (kind is NEW and bool(cmd.subscribe))  # type: ignore[union-attr]


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
