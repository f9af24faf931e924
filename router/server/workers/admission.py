"""Admission bounds for the router as a whole when several workers accept
(docs/workers.md#one-router-to-the-operator).

The listener's caps (edge/admission.py: open connections in total and per
address, the pool of pending ones with its eviction of the most represented
address) are kept by the supervisor, in one `Admission` for every worker: a
worker asks it at each accept, over a Unix stream socket in the abstract
namespace named after the supervisor (one link per worker, lines of text), and
tells it when a connection's handshake is through and when it ends. So the
caps count every worker's connections, whichever worker accepts; a full pool
drops the oldest pending connection of the most represented address in
whatever worker holds it.

The cost is one round trip to the supervisor per accepted connection (the
asks of a burst go in one write each way), next to a TCP, TLS and SMP
handshake. A worker keeps its own cap on the descriptors of its process.
A worker that dies closes its link: the supervisor forgets its connections.
Each admission's answer also tells the worker the router's open connections and
the workers accepting now (their links): a worker over its share leaves the
backlog to the others a moment (`SharedAdmission.over_share`, edge/listener.py;
docs/workers.md#the-listener).

The same link carries the router's NEW budgets (core/limits.py `RouterBudgets`,
the supervisor's buckets per address and for the router): a worker whose grant
for an address is spent borrows a batch (`B id wanted key` -> `G id granted key`)
and gives back what it did not use (`R tokens key`). A borrow with no token to
grant is answered with the seconds until the buckets have one (`W id seconds key`,
the key `*` if the router's bucket is the one to wait for), for which the worker
refuses that key's NEWs itself. A worker that dies loses its grants: the buckets
refill as after NEWs.

    worker -> supervisor              supervisor -> worker
    A id key      admit              Y id open workers / N id reason
    E id          established        X id   evicted from the pool
    C id          closed
    B id n key    borrow n tokens    G id granted key / W id seconds key
    R n key       n tokens back
"""

from __future__ import annotations

import logging
import math
import os
import socket
import struct
from itertools import count

import trio

from ..core.limits import GRANT_BATCH, Loan, RouterBudgets
from ..edge.admission import Admission, AdmissionLimits, Refused, Ticket
from ..edge.block_stream import STREAM_GONE
from ..edge.listener import EVICTION_LOG_INTERVAL, connection_cap
from ..settings.config import RouterConfig
from .channel import with_queued

log = logging.getLogger(__name__)

_PEERCRED = struct.Struct("3i")  # pid, uid, gid
CONNECT_ATTEMPTS = 50
CONNECT_PAUSE = 0.1  # seconds between two attempts to reach the supervisor
MAX_LINE = 1024  # bytes; an address key is far shorter
# Connections a worker may hold over its share before it leaves the backlog to the
# others (edge/listener.py `_accept_waiting`): a burst's first batch is this worker's.
SHARE_SLACK = 8
GONE = "the router's supervisor cannot be reached"
_LINK_ERRORS = (*STREAM_GONE, OSError)


def admission_address(group: str) -> bytes:
    """The abstract socket name of the supervisor's admission, for the workers of `group`."""
    return f"\0smp-router.{group}.admission".encode()


# --- the supervisor's side ---------------------------------------------------------------


class _WorkerTicket(Ticket):
    """A connection a worker holds, as the supervisor counts it."""

    __slots__ = ("link", "ticket_id")

    link: _WorkerLink
    ticket_id: int

    def evict(self) -> None:
        super().evict()
        self.link.tell(f"X {self.ticket_id}")
        self.link.admission.log_eviction()


class RouterAdmission(Admission):
    last_eviction_log = -math.inf
    workers = 0  # links open: the workers that accept now
    budgets: RouterBudgets | None = None  # the NEW budgets the workers borrow from

    def _new_ticket(self, key: str) -> Ticket:
        return _WorkerTicket(self, key)

    def log_eviction(self) -> None:
        now = trio.current_time()
        if now - self.last_eviction_log >= EVICTION_LOG_INTERVAL:
            self.last_eviction_log = now
            log.warning(
                "the pool of connections being opened is full (%d): the most represented "
                "address's oldest ones are dropped for newcomers (%d so far)",
                self.limits.max_pending, self.evicted + 1)


class _WorkerLink:
    def __init__(self, admission: RouterAdmission) -> None:
        self.admission = admission
        self.tickets: dict[int, _WorkerTicket] = {}
        self._send, self._lines = trio.open_memory_channel[str](math.inf)

    def tell(self, line: str) -> None:
        self._send.send_nowait(line)

    def take(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "A":
            text_id, _, key = rest.partition(" ")
            ticket_id = int(text_id)
            try:
                ticket = self.admission.admit(key)
            except Refused as refusal:
                self.tell(f"N {ticket_id} {refusal}")
                return
            assert isinstance(ticket, _WorkerTicket)
            ticket.link, ticket.ticket_id = self, ticket_id
            self.tickets[ticket_id] = ticket
            # With the router's count and the workers that accept: the worker's share.
            self.tell(f"Y {ticket_id} {self.admission.open} {self.admission.workers}")
        elif kind == "E":
            established = self.tickets.get(int(rest))
            if established is not None:
                established.established()
        elif kind == "C":
            closed = self.tickets.pop(int(rest), None)
            if closed is not None:
                closed.close()
        elif kind == "B":
            text_id, _, rest = rest.partition(" ")
            wanted, _, key = rest.partition(" ")
            budgets = self.admission.budgets
            granted = 0 if budgets is None else budgets.lend(key, min(int(wanted), GRANT_BATCH))
            if granted or budgets is None:
                self.tell(f"G {int(text_id)} {granted} {key}")
            else:  # the worker refuses the key itself until then (core/limits.py)
                refusal = budgets.refusal(key)
                self.tell(f"W {int(text_id)} {refusal.wait:.3f} {refusal.refused}")
        elif kind == "R":
            tokens, _, key = rest.partition(" ")
            if self.admission.budgets is not None:
                self.admission.budgets.take_back(key, min(int(tokens), GRANT_BATCH))
        else:
            raise ValueError(f"not an admission line: {line[:40]!r}")

    def forget_all(self) -> None:
        for ticket in self.tickets.values():
            ticket.close()
        self.tickets.clear()
        self._send.close()

    async def write(self, stream: trio.SocketStream) -> None:
        async for line in self._lines:
            batch = with_queued(line, self._lines)
            await stream.send_all("".join(f"{text}\n" for text in batch).encode())


async def serve_admission(
    group: str, limits: AdmissionLimits, budgets: RouterBudgets | None = None,
    *, task_status: trio.TaskStatus[RouterAdmission] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The router's admission and NEW budgets, asked by every worker of `group`, until
    cancelled."""
    admission = RouterAdmission(limits)
    admission.budgets = budgets
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        await listener.bind(admission_address(group))
        listener.listen(64)
        async with trio.open_nursery() as nursery:
            task_status.started(admission)
            while True:
                sock, _ = await listener.accept()
                nursery.start_soon(_serve_worker, admission, sock)


async def serve_router_admission(
    group: str, config: RouterConfig,
    *, task_status: trio.TaskStatus[RouterAdmission] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`serve_admission` with the router's caps and NEW budgets of `config` (the
    supervisor's, or the one of workers in one process: in_process.py)."""
    await serve_admission(group, router_admission_limits(config), RouterBudgets(config),
                          task_status=task_status)


def router_admission_limits(config: RouterConfig) -> AdmissionLimits:
    """The listener's caps for the router as a whole: its total of connections at most
    what the workers' descriptor limits allow together."""
    limits = config.edge_limits()
    return AdmissionLimits(
        limits.max_pending, limits.max_pending_per_address,
        min(limits.max_connections, config.workers * connection_cap(limits)),
        limits.max_connections_per_address)


async def _serve_worker(admission: RouterAdmission, sock: trio.socket.SocketType) -> None:
    _pid, uid, _gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    stream = trio.SocketStream(sock)
    async with stream:
        if uid != os.getuid():
            log.warning("refused an admission link from user %d", uid)
            return
        link = _WorkerLink(admission)
        admission.workers += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(link.write, stream)
                async for line in _lines(stream):
                    link.take(line)
                nursery.cancel_scope.cancel()
        except (*_LINK_ERRORS, ValueError) as e:
            log.warning("an admission link ended: %r", e)
        finally:
            admission.workers -= 1
            link.forget_all()  # the worker is gone: its connections with it


async def _lines(stream: trio.SocketStream):  # type: ignore[no-untyped-def]
    buffer = bytearray()
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buffer += data
        *lines, rest = buffer.split(b"\n")
        if len(rest) > MAX_LINE:
            raise ValueError("an admission line too long")
        buffer = bytearray(rest)
        for line in lines:
            yield line.decode("utf-8")


# --- a worker's side ---------------------------------------------------------------------


class SharedTicket:
    """A worker's connection admitted by the router's admission: its own ticket (the
    cap on this process's descriptors, the connection's cancel scope) and the
    supervisor's count of it."""

    __slots__ = ("_local", "_shared", "ticket_id", "_open")

    def __init__(self, local: Ticket, shared: SharedAdmission, ticket_id: int) -> None:
        self._local = local
        self._shared = shared
        self.ticket_id = ticket_id
        self._open = True

    @property
    def scope(self) -> trio.CancelScope:
        return self._local.scope

    @property
    def pending(self) -> bool:
        return self._local.pending

    def established(self) -> None:
        if self._local.pending:
            self._local.established()
            self._shared.pending.pop(self.ticket_id, None)
            self._shared.tell(f"E {self.ticket_id}")

    def close(self) -> None:
        self.established()
        self._local.close()
        if self._open:
            self._open = False
            self._shared.tell(f"C {self.ticket_id}")

    def evict(self) -> None:
        self._shared.pending.pop(self.ticket_id, None)
        self._local.evict()


class _Ask:
    __slots__ = ("answered", "refusal")

    def __init__(self) -> None:
        self.answered = trio.Event()
        self.refusal: str | None = None


class _Borrow:
    __slots__ = ("answered", "loan")

    def __init__(self) -> None:
        self.answered = trio.Event()
        self.loan = Loan(0)


class SharedAdmission:
    """A worker's end of the router's admission: asks at each accept, and borrows
    from the router's NEW budgets (module doc; core/limits.py `Lender`)."""

    def __init__(self, group: str, workers: int = 1) -> None:
        self._group = group
        self._ids = count(1)
        self._asks: dict[int, _Ask] = {}
        self._borrows: dict[int, _Borrow] = {}
        # the pending ones, which the supervisor may evict (established ones are not kept)
        self.pending: dict[int, SharedTicket] = {}
        self._send, self._lines = trio.open_memory_channel[str](math.inf)
        self._gone = False
        # The router's open connections and accepting workers, as of the last admission
        # (before the first: none, and every worker the router was started with).
        self.router_open = 0
        self.workers = workers

    def tell(self, line: str) -> None:
        if not self._gone:
            self._send.send_nowait(line)

    def over_share(self, own: int, taking: int = 0) -> bool:
        """Whether this worker, holding `own` connections and `taking` more off the
        backlog, would hold more than `SHARE_SLACK` over its share of the router's
        (its view: the router's count at the last admission, with this worker's asks
        since). The listener then leaves the backlog to the others a moment."""
        if self.workers < 2:
            return False
        total = self.router_open + len(self._asks) + taking
        return (own + taking) * self.workers > total + SHARE_SLACK * self.workers

    async def admit(self, key: str, local: Ticket) -> SharedTicket:
        """The router's ticket for a connection this worker admitted (`local`);
        Refused if the router's caps keep it out (`local` is then closed)."""
        if self._gone:
            local.close()
            raise Refused(GONE)
        ticket_id = next(self._ids)
        ask = self._asks[ticket_id] = _Ask()
        self.tell(f"A {ticket_id} {key}")
        try:
            await ask.answered.wait()
        except BaseException:
            local.close()
            if self._asks.pop(ticket_id, None) is None and ask.refusal is None:
                self.tell(f"C {ticket_id}")  # admitted as this was cancelled: given back
            raise
        if ask.refusal is not None:
            local.close()
            raise Refused(ask.refusal)
        ticket = SharedTicket(local, self, ticket_id)
        if local.pending:
            self.pending[ticket_id] = ticket
        return ticket

    async def borrow(self, key: str, wanted: int) -> Loan:
        """Up to `wanted` NEW tokens of address `key` and the router; none if the
        supervisor has none (with the seconds until it has) or cannot be reached.
        Cancelled, a late grant is given back."""
        if self._gone:
            return Loan(0)
        borrow_id = next(self._ids)
        borrow = self._borrows[borrow_id] = _Borrow()
        self.tell(f"B {borrow_id} {wanted} {key}")
        try:
            await borrow.answered.wait()
        except BaseException:
            self._borrows.pop(borrow_id, None)  # its grant, if one comes, goes back
            raise
        return borrow.loan

    def give_back(self, key: str, tokens: int) -> None:
        if tokens > 0:
            self.tell(f"R {tokens} {key}")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reach the supervisor, then carry the asks and answers until cancelled."""
        stream = await _connect(admission_address(self._group))
        async with stream:
            task_status.started()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write, stream)
                    async for line in _lines(stream):
                        self._take(line)
                    nursery.cancel_scope.cancel()
            except (*_LINK_ERRORS, ValueError) as e:
                log.warning("the admission link ended: %r", e)
            finally:
                self._lose()

    def _take(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        text_id, _, reason = rest.partition(" ")
        ticket_id = int(text_id)
        if kind == "G":
            granted, _, key = reason.partition(" ")
            borrow = self._borrows.pop(ticket_id, None)
            if borrow is None:  # its NEW gave up waiting
                self.give_back(key, int(granted))
            else:
                borrow.loan = Loan(int(granted))
                borrow.answered.set()
            return
        if kind == "W":  # nothing granted before that many seconds
            borrow = self._borrows.pop(ticket_id, None)
            if borrow is not None:
                wait, _, refused = reason.partition(" ")
                borrow.loan = Loan(0, float(wait), refused)
                borrow.answered.set()
            return
        if kind == "X":  # the router's full pool drops this pending connection
            ticket = self.pending.get(ticket_id)
            if ticket is not None:
                ticket.evict()
            return
        if kind == "Y" and reason:
            router_open, _, workers = reason.partition(" ")
            self.router_open, self.workers = int(router_open), int(workers)
        ask = self._asks.pop(ticket_id, None)
        if ask is None:
            if kind == "Y":  # its ask was cancelled meanwhile: give it back
                self.tell(f"C {ticket_id}")
            return
        if kind == "N":
            ask.refusal = reason or "refused"
        ask.answered.set()

    def _lose(self) -> None:
        self._gone = True
        for ask in self._asks.values():
            ask.refusal = GONE
            ask.answered.set()
        self._asks.clear()
        for borrow in self._borrows.values():
            borrow.answered.set()  # no tokens
        self._borrows.clear()

    async def _write(self, stream: trio.SocketStream) -> None:
        async for line in self._lines:
            batch = with_queued(line, self._lines)
            await stream.send_all("".join(f"{text}\n" for text in batch).encode())


async def _connect(address: bytes) -> trio.SocketStream:
    for _ in range(CONNECT_ATTEMPTS):
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await sock.connect(address)
        except OSError:
            sock.close()
            await trio.sleep(CONNECT_PAUSE)
            continue
        return trio.SocketStream(sock)
    raise OSError(GONE)
