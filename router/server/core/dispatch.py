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

Store reads by the block, not by the command. Pass 1 parses every transmission
first, then reads the records of all the queues they name with one
`QueueStore.get_queues` per party (one `SELECT ... WHERE id IN (...)` on SQLite),
and verifies each against its record: the same records the lookups one by one
would have read before any command of the block runs, and a missing queue is
verified against the dummy key as before. In pass 2 a run of consecutive SUBs of
distinct queues is prepared together (`Commands.subscribe_run`): each is
registered and holds its answer (`Subscriptions.answering`), then the heads of
all of them are read with one `MessageStore.peek_messages`, after every
registration, so the no-gap argument of a single SUB holds for each (a write
after the read is remembered and pushed after the answer, services.py,
delivery.py); each SUB then answers in its turn with the head read. The answers
are those the commands one by one give (bench/RESULTS.md, "Reconnect storm").
On a store that writes a run in one call (PostgreSQL: one round trip, one
transaction), a run of consecutive SENDs is written together and a run of ACKs
of distinct queues deleted together (`Commands.send_run`, `ack_run`): each is
answered, in its turn, what it alone would have been, and nothing is answered
OK before the run's transaction committed (a failure answers the run's commands
the store's error; the commands before it were committed by their own runs).

A block that does not parse at all gets one `ERR BLOCK` with empty corrId and
entity id. A bug in a handler is logged and answered `ERR INTERNAL`; it never
reaches the connection, let alone the router.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, NamedTuple, Protocol

from router.protocol.block import decode_batch_content, iter_batch_content, unpad_block
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
from .forwarded import Forwarded, ForwardRoute
from .turns import (
    Pace,
    Pacing,
    Slices,
    Turns,
    execution_cost,
    pace_of,
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
# Service subscriptions: verified against the session key the service's certificate signed.
_SERVICE = (SUBS, NSUBS)
# Commands whose answer a push for the same queue may follow (`_may_be_overtaken`).
_OVERTAKABLE = frozenset({SUB, NSUB, ACK, GET, SUBS, NSUBS})

# Runs one verified command for its subscriber (commands.py).
Execute = Callable[["ClientSubscriptions", Verified], Awaitable[list[bytes]]]
# A block's records as pass 1 read them, by (party, entity id).
Records = dict[tuple[Party, bytes], QueueRecord | None]


class SubRun(Protocol):
    """A run of SUBs prepared together (`Commands.subscribe_run`)."""

    seconds_each: float  # the preparation's time, shared by the run's SUBs

    def finish(self, index: int) -> list[bytes]:
        """The answers of the run's `index`th SUB (raises as its handler would)."""


# Prepares a run of consecutive SUBs of distinct queues (commands.py).
SubscribeRun = Callable[["ClientSubscriptions", list[Verified]], Awaitable[SubRun]]


class _Parsed(NamedTuple):
    """A transmission whose syntax and credentials passed, before its authorization."""

    t: Transmission
    cmd: Command
    version: int
    seconds: float  # parsing it
ClientAwaitsAck = Callable[["ClientSubscriptions", bytes, bytes], bool]


_BAD_BLOCK = [error_transmission(b"", b"", BLOCK)]

class Dispatcher:
    __slots__ = ("_queues", "_execute_command", "turns", "_latencies", "_forwarded",
                 "_awaits_ack", "_subscribe_run", "_store_runs")

    def __init__(
        self, queues: QueueStore, execute: Execute, latencies: Latencies,
        turns: Turns | None = None, counters: Counters | None = None,
        awaits_ack: ClientAwaitsAck = lambda client, recipient_id, msg_id: False,
        subscribe_run: SubscribeRun | None = None,
        store_runs: dict[type, SubscribeRun] | None = None,
    ) -> None:
        self._queues = queues
        self._execute_command = execute
        self._subscribe_run = subscribe_run  # None: every SUB reads its head alone
        # SEND, ACK: a run written in one store call; none: each command writes alone.
        self._store_runs = store_runs or {}
        self._latencies = latencies
        self.turns = turns or Turns()
        # Whether an ACK is of the message in flight to that client (subscriptions.py).
        self._awaits_ack = awaits_ack
        # RFWD: a transmission inside a command, verified and run as this block's are.
        self._forwarded = Forwarded(counters or Counters(), self.verify_forwarded,
                                    self._execute)

    async def process_block(self, client: ClientSubscriptions, block: bytes) -> list[bytes]:
        version = client.conn.version
        try:
            content = unpad_block(block)
            pace = pace_of(iter_batch_content(content), version,
                           partial(self._awaits_ack, client))
        except ProtocolError:
            return list(_BAD_BLOCK)
        # Parked as its content until its turn, without the block's padding: when a
        # wave of clients sends SUB blocks at once, each waiting block is its content
        # (a few hundred bytes per command), not 16 KB (bench/RESULTS.md, the storm).
        # Nor is it taken apart before its turn: `pace_of` read its first transmissions
        # only, so a storm's blocks arriving together cost little each (turns.py).
        del block
        take_apart = partial(decode_batch_content, content)
        del content
        return await self._paced(client, pace, take_apart)

    async def process_transmissions(self, client: ClientSubscriptions,
                                    raw_transmissions: list[bytes]) -> list[bytes]:
        """`process_block` for a block's transmissions already taken apart (a front's
        own part of a block it hands off: workers/handoff.py), paced the same way,
        without packing them into a block to take it apart again."""
        try:
            pace = pace_of(raw_transmissions, client.conn.version,
                           partial(self._awaits_ack, client))
        except ProtocolError:
            return list(_BAD_BLOCK)
        return await self._paced(client, pace, lambda: raw_transmissions)

    async def _paced(self, client: ClientSubscriptions, pace: Pace,
                     take_apart: Callable[[], list[bytes]]) -> list[bytes]:
        """The transmissions `take_apart` gives, answered at `pace`: taken apart once
        their turn has come, if they wait for one."""
        turn = self.turns.turn() if pace is Pace.TURNS else None
        try:
            if turn is not None:
                await turn.begin()
            try:
                raw_transmissions = take_apart()
            except ProtocolError:  # past the transmissions `pace_of` read
                return list(_BAD_BLOCK)
            del take_apart
            pacing = turn if turn is not None else None if pace is Pace.FREE else Slices()
            return await self._answer(client, raw_transmissions, pacing)
        finally:
            if turn is not None:
                turn.finish()

    async def _answer(
        self, client: ClientSubscriptions, raw_transmissions: list[bytes], turn: Pacing | None
    ) -> list[bytes]:
        """Both passes; with a `turn`, each piece of work is paid for before it is done."""
        conn = client.conn
        out: list[bytes] = []
        verified: list[tuple[Verified, float]] = []  # with the time its verification took
        version = conn.version
        parsed = [self._parse_guarded(raw, version) for raw in raw_transmissions]
        records: Records | None = None
        if len(parsed) > 1:
            started = perf_counter()
            records = await self._read_records(conn, parsed)
            share = (perf_counter() - started) / len(parsed)
        for raw, p in zip(raw_transmissions, parsed, strict=True):
            if turn is not None:
                await turn.spend(verification_cost(raw))
            if isinstance(p, bytes):
                out.append(p)
                continue
            started = perf_counter()
            result = await self._authorize_guarded(conn, p, records)
            if isinstance(result, Verified):
                seconds = perf_counter() - started + p.seconds
                verified.append((result, seconds if records is None else seconds + share))
            else:
                out.append(result)
        del raw_transmissions, parsed, records
        if len(verified) > 1:
            await self._associate_block(client, verified)
        forwarded: dict[int, list[bytes]] = {}  # a worker of several: its RFWDs' answers
        if self._forwarded.route is not None:
            forwarded = await self._answer_forwarded(client, verified)
        observe = self._latencies.command
        overtakable = False  # an answer in `out` that a push could overtake
        run: SubRun | None = None  # the SUBs from `run_start` to `run_end` prepared together
        run_start = run_end = 0
        for index, (v, verifying) in enumerate(verified):
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
            kind = type(v.command)
            prepare = self._subscribe_run if kind is SUB else self._store_runs.get(kind)
            if index >= run_end and prepare is not None:
                run_end = _run_end(verified, index, distinct=kind is not SEND)
                run_start, run = index, None
                if run_end - index > 1:
                    run = await prepare(client, [w for w, _ in verified[index:run_end]])
            started = perf_counter()
            if forwarded and index in forwarded:
                out.extend(forwarded.pop(index))
            elif run is not None and index < run_end:
                out.extend(await self._execute(client, v, run, index - run_start))
                verifying += run.seconds_each
            else:
                out.extend(await self._execute(client, v))
            observe(type(v.command).__name__, verifying + perf_counter() - started)
        return out

    async def _answer_forwarded(
        self, client: ClientSubscriptions, verified: list[tuple[Verified, float]]
    ) -> dict[int, list[bytes]]:
        """The answers of the block's RFWDs by their place, the queues of other workers
        served by them together (forwarded.py, docs/workers.md#hand-offs-in-blocks)."""
        places = [i for i, (v, _) in enumerate(verified) if type(v.command) is RFWD]
        if not places:
            return {}
        answers = await self._forwarded.answer_many(client, [verified[i][0] for i in places])
        return dict(zip(places, answers, strict=True))

    def route_forwarded(self, route: ForwardRoute) -> None:
        """A worker of several: forwarded transmissions run in their queue's worker."""
        self._forwarded.route = route

    async def run_forwarded(self, client: ClientSubscriptions, transmission: bytes,
                            version: int) -> list[bytes]:
        """A transmission another worker opened from an RFWD, run here, its owner."""
        return await self._forwarded.run_here(client, transmission, version)

    async def _associate_block(
        self, client: ClientSubscriptions, verified: list[tuple[Verified, float]]
    ) -> None:
        """The SUBs (NSUBs) of a block that move queues to this connection's service or
        away from another, in one store write per side; each command then finds its
        queue associated already (docs/protocol.md#service-signature, "Association").
        A store failure leaves the commands to associate their queues one by one."""
        service_id = client.conn.service_id
        moving: dict[Party, list[int]] = {Party.RECIPIENT: [], Party.NOTIFIER: []}
        for i, (v, _) in enumerate(verified):
            queue, kind = v.queue, type(v.command)
            if queue is None:
                continue
            if kind is SUB and queue.rcv_service_id != service_id:
                moving[Party.RECIPIENT].append(i)
            elif kind is NSUB and queue.notifier is not None and (
                queue.ntf_service_id != service_id
            ):
                moving[Party.NOTIFIER].append(i)
        for party, indexes in moving.items():
            if len(indexes) < 2:
                continue  # one goes the usual way
            rids = [verified[i][0].queue.recipient_id for i in indexes]  # type: ignore[union-attr]
            try:
                results = await self._queues.set_queues_service(rids, party, service_id)
            except StoreError as e:
                log.warning("associating a block's queues for %r failed: %s", client.conn, e)
                continue
            side = "rcv_service_id" if party is Party.RECIPIENT else "ntf_service_id"
            for i, error in zip(indexes, results, strict=True):
                v, took = verified[i]
                if error is None and v.queue is not None:
                    queue = replace(v.queue, **{side: service_id})
                    verified[i] = (replace(v, queue=queue), took)


    async def _read_records(self, conn: Connection, parsed: list[_Parsed | bytes]) -> Records:
        """The records of every queue the block names, one store call per party; what
        a failed call would have read is left to the lookups one by one."""
        wanted: dict[Party, list[bytes]] = {}
        for p in parsed:
            if not isinstance(p, bytes) and (party := _lookup_party(p.cmd)) is not None:
                wanted.setdefault(party, []).append(p.t.entity_id)
        records: Records = {}
        for party, ids in wanted.items():
            try:
                found = await self._queues.get_queues(party, ids)
            except StoreError as e:
                log.warning("queue lookups of a block from %r failed: %s", conn, e)
                continue
            records.update(zip(((party, i) for i in ids), found, strict=True))
        return records

    def _parse_guarded(self, raw: bytes, version: int) -> _Parsed | bytes:
        try:
            return _parse_transmission(raw, version)
        except Exception:
            log.exception("parsing a transmission failed")
            return error_transmission(b"", b"", INTERNAL)

    async def _authorize_guarded(
        self, conn: Connection, p: _Parsed, records: Records | None
    ) -> Verified | bytes:
        try:
            result = await self._authorize(conn, p.t, p.cmd, p.version, records)
        except StoreError as e:  # the queue lookup failed: answer what the store says
            log.warning("queue lookup for %r failed: %s", conn, e)
            # to the command's corrId, as the reference's VRFailed: a client waits for it
            return error_transmission(p.t.corr_id, p.t.entity_id, e.error, p.version)
        except Exception:
            log.exception("verifying a transmission from %r failed", conn)
            return error_transmission(p.t.corr_id, p.t.entity_id, INTERNAL, p.version)
        if isinstance(result, ErrorType):
            return error_transmission(p.t.corr_id, p.t.entity_id, result, p.version)
        return result

    async def _execute(
        self, client: ClientSubscriptions, v: Verified, run: SubRun | None = None,
        position: int = 0,
    ) -> list[bytes]:
        conn = client.conn
        try:
            if run is not None:
                return run.finish(position)
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
        p = _parse_transmission(raw, version, allowed)
        if isinstance(p, bytes):
            return p
        result = await self._authorize(conn, p.t, p.cmd, version)
        if isinstance(result, ErrorType):
            return error_transmission(p.t.corr_id, p.t.entity_id, result, version)
        return result

    async def _lookup(
        self, party: Party, entity_id: bytes, records: Records | None
    ) -> QueueRecord | None:
        """The record pass 1 read for the block (`_read_records`), else the store's."""
        if records is not None:
            key = (party, entity_id)
            if key in records:
                return records[key]
        return await self._queues.get_queue(party, entity_id)

    async def _authorize(
        self, conn: Connection, t: Transmission, cmd: Command, version: int,
        records: Records | None = None,
    ) -> Verified | ErrorType:
        """Look the queue up by the party the command speaks for and check the signature.

        Whatever is missing, one verification of the kind the authorization claims
        still runs (`verify_authorization` uses a dummy key), so the answer time does
        not reveal which queues or keys exist (docs/protocol.md#behaviour).
        """
        refused = _service_refusal(conn, t, cmd)
        if refused is not None:
            return refused
        kind = type(cmd)
        if kind in _UNVERIFIED:
            return Verified(t.corr_id, t.entity_id, cmd, None, version)
        party = _lookup_party(cmd)
        queue = None if party is None else await self._lookup(party, t.entity_id, records)
        if kind is LGET:
            # Unsigned: the link id is the capability (docs/protocol.md#short-links).
            return Verified(t.corr_id, t.entity_id, cmd, queue, version)
        if kind is NEW:
            key = cmd.rcv_auth_key  # type: ignore[union-attr]
        elif kind is SEND:
            if queue is not None and queue.sender_key is None and not t.authorization:
                return Verified(t.corr_id, t.entity_id, cmd, queue, version)  # unsecured queue
            if not t.authorization:
                return AUTH
            key = None if queue is None else queue.sender_key
        elif kind is SKEY or kind is LKEY:
            key = _skey_key(queue, cmd.sender_key)  # type: ignore[union-attr]
        elif kind is NSUB:
            key = None if queue is None or queue.notifier is None else queue.notifier.notifier_key
        elif kind in _SERVICE:
            key = _service_key(conn, t.entity_id)
        else:
            if queue is not None and queue.more_recipient_keys:
                return self._verified_by_any_key(conn, t, cmd, queue, version)
            key = None if queue is None else queue.recipient_key
        signed = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
        if t.service_sig is not None:
            # A queue key in a service session signs the certificate's hash first
            # (docs/protocol.md#service-signature); only a service session gets here with one.
            signed = conn.service.cert_hash + signed  # type: ignore[union-attr]
        verified = verify_authorization(
            t.authorization, key, signed, corr_id=t.corr_id,
            router_dh_private=conn.router_dh_private,
        )
        if not verified or key is None:
            return SERVICE if kind in _SERVICE and conn.service is None else AUTH
        return Verified(t.corr_id, t.entity_id, cmd, queue, version)

    def _verified_by_any_key(
        self, conn: Connection, t: Transmission, cmd: Command, queue: QueueRecord, version: int
    ) -> Verified | ErrorType:
        """A queue with several recipient keys (RKEY) takes a command signed by any of
        them. Every key is tried, whichever matches, so the time depends on how many
        keys the queue has, never on which one signed (docs/protocol.md#rkey)."""
        signed = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
        matched = False
        for key in queue.recipient_keys:
            matched |= verify_authorization(
                t.authorization, key, signed, corr_id=t.corr_id,
                router_dh_private=conn.router_dh_private,
            )
        return Verified(t.corr_id, t.entity_id, cmd, queue, version) if matched else AUTH


_PARTY_OF = {LGET: Party.LINK, LKEY: Party.LINK, SEND: Party.SENDER, SKEY: Party.SENDER,
             NSUB: Party.NOTIFIER}
_NO_LOOKUP = frozenset({*_UNVERIFIED, NEW, *_SERVICE})


def _lookup_party(cmd: Command) -> Party | None:
    """Whose id the command's entity id is (its queue is looked up by it); None: the
    command names no queue."""
    kind = type(cmd)
    if kind in _NO_LOOKUP:
        return None
    return _PARTY_OF.get(kind, Party.RECIPIENT)


def _run_end(verified: Sequence[tuple[Verified, float]], start: int, *, distinct: bool) -> int:
    """The end of the run of consecutive commands of `start`'s kind, of distinct queues
    if `distinct` (SUB, ACK: a queue twice is answered twice, the second time after
    the first's answer; SENDs of one queue are written in their order, in one run)."""
    kind = type(verified[start][0].command)
    seen = set()
    end = start
    while end < len(verified):
        v = verified[end][0]
        if type(v.command) is not kind or (distinct and v.entity_id in seen):
            break
        seen.add(v.entity_id)
        end += 1
    return end


def _parse_transmission(
    raw: bytes, version: int, allowed: tuple[type, ...] | None = None
) -> _Parsed | bytes:
    """The transmission and its command, or the `ERR` it is answered with."""
    started = perf_counter()
    try:
        t = decode_transmission(raw, version)
    except ProtocolError as e:
        return error_transmission(b"", b"", e.error, version)
    cmd = _parse(t, version)
    if isinstance(cmd, ErrorType):
        return error_transmission(t.corr_id, t.entity_id, cmd, version)
    if allowed is not None and type(cmd) not in allowed:
        return error_transmission(t.corr_id, t.entity_id, CMD_PROHIBITED, version)
    return _Parsed(t, cmd, version, perf_counter() - started)


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


# The commands a service session signs with its session key besides the queue's
# (the reference's `useServiceAuth`).
_SERVICE_SIGNED = (NEW, SUB, NSUB)
# The commands of each role's sessions (the reference's `partyClientRole`): a notifier
# service subscribes notifiers, a proxy forwards; a messaging service does the rest.
_NOTIFIER_COMMANDS = (NSUB, NSUBS)
_ROLE_ALLOWS: dict[bytes, Callable[[type], bool]] = {
    b"M": lambda kind: kind not in _NOTIFIER_COMMANDS and kind is not RFWD,
    b"N": lambda kind: kind in _NOTIFIER_COMMANDS or kind is PING,
    b"P": lambda kind: kind is RFWD or kind is PING,
}


def _service_refusal(conn: Connection, t: Transmission, cmd: Command) -> ErrorType | None:
    """The reference's checks before any queue is looked up (`verifyQueueTransmission`):
    a command outside the session's role is `CMD PROHIBITED`; a service signature where
    none belongs, or none where one must be, or one that does not verify, `SERVICE`
    (docs/protocol.md#service-signature)."""
    session = conn.service
    kind = type(cmd)
    if session is not None and not _ROLE_ALLOWS[session.role](kind):
        return CMD_PROHIBITED
    if kind not in _SERVICE_SIGNED:
        return None if t.service_sig is None else SERVICE
    if session is None:
        return None if t.service_sig is None else SERVICE
    if t.service_sig is None:
        return SERVICE
    signed = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
    if not verify_authorization(t.service_sig, session.service_key, signed, corr_id=t.corr_id):
        return SERVICE
    return None


def _service_key(conn: Connection, entity_id: bytes) -> bytes | None:
    """SUBS / NSUBS name the service of this connection's certificate and are signed
    with the session key its leaf signed (docs/protocol.md#service-subscriptions)."""
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
