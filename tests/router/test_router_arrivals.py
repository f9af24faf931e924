"""A crowd of connections bringing work at once, against the router's real
listener over native TLS on 127.0.0.1: blocks, TLS handshakes and closes are
taken in a few per pass of the scheduler (router/server/edge/arrivals.py), and a
PING sent behind a crowd is answered within a bounded number of passes.

Passes are counted by a Trio instrument (`PassCounter`), never timed. The run's
`Arrivals` is given 4 places per pass, so that a crowd of 40 is ten rounds.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from pathlib import Path

import pytest
import trio
from test_router_over_tls import _connect_over_tls, _hold_router

from router.protocol.block import BatchPacker
from router.protocol.types import PING, PONG
from router.server import Router
from router.server.edge import handshake
from router.server.edge.arrivals import arrivals
from router.server.edge.block_stream import TransportClosed
from router.server.edge.native_tls import TlsBlockTransport
from router.server.edge.openssl_tls import OpenSslStream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "edge"))
from test_edge_arrivals import PassCounter  # noqa: E402

PER_PASS = 4
CROWD = 40


class WorkCounter(PassCounter):
    """`PassCounter`, with each pass's work by kind too."""

    def __init__(self) -> None:
        super().__init__()
        self.by_kind: list[collections.Counter[str]] = []
        self._kinds: collections.Counter[str] = collections.Counter()

    def after_io_wait(self, timeout: float) -> None:
        super().after_io_wait(timeout)
        self._kinds = collections.Counter()

    def before_io_wait(self, timeout: float) -> None:
        super().before_io_wait(timeout)
        self.by_kind.append(self._kinds)

    def count(self, kind: str) -> None:
        self.mark()
        self._kinds[kind] += 1

    def most_in_a_pass(self, kind: str) -> int:
        return max(kinds[kind] for kinds in self.by_kind)

    def total(self, kind: str) -> int:
        return sum(kinds[kind] for kinds in self.by_kind)


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> WorkCounter:
    """Counts, per pass, the blocks the router read, the TLS handshakes it began, the
    SMP hellos it made and the connections it took apart."""
    counter = WorkCounter()
    receive_block = TlsBlockTransport.receive_block
    do_handshake = OpenSslStream.do_handshake
    cleanup = Router._cleanup

    async def counted_block(self):  # type: ignore[no-untyped-def]
        block = await receive_block(self)
        counter.count("block")
        return block

    async def counted_handshake(self):  # type: ignore[no-untyped-def]
        counter.count("handshake")
        await do_handshake(self)

    def counted_cleanup(self, client):  # type: ignore[no-untyped-def]
        counter.count("close")
        cleanup(self, client)

    encode_server_hello = handshake.encode_server_hello

    def counted_hello(hello):  # type: ignore[no-untyped-def]
        counter.count("hello")
        return encode_server_hello(hello)

    monkeypatch.setattr(handshake, "encode_server_hello", counted_hello)
    monkeypatch.setattr(TlsBlockTransport, "receive_block", counted_block)
    monkeypatch.setattr(OpenSslStream, "do_handshake", counted_handshake)
    monkeypatch.setattr(Router, "_cleanup", counted_cleanup)
    return counter


def _ping_block(session) -> bytes:  # type: ignore[no-untyped-def]
    packer = BatchPacker()
    assert packer.add(session.transmission(b"", PING(), None))
    return packer.take_block()


async def test_a_crowd_connecting_pinging_and_leaving_at_once_is_a_few_per_pass(
    nursery: trio.Nursery, counter: WorkCounter,
) -> None:
    gate = arrivals()
    gate.per_pass = PER_PASS
    router, port = await nursery.start(_hold_router)
    go, leave = trio.Event(), trio.Event()
    connected = answered = left = 0
    parked_before = gate.parked

    async def client() -> None:
        nonlocal connected, answered, left
        async with _connect_over_tls(port, router, version=10) as session:
            connected += 1
            block = _ping_block(session)
            await go.wait()
            await session.send_block(block)
            (reply,) = await session.receive()
            assert reply.response == PONG()
            answered += 1
            await leave.wait()
        left += 1

    trio.lowlevel.add_instrument(counter)
    try:
        async with trio.open_nursery() as clients:
            for _ in range(CROWD):
                clients.start_soon(client)
            while connected < CROWD:  # handshakes, TLS and SMP: 40 at once
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            go.set()  # 40 blocks at once
            while answered < CROWD:
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            leave.set()  # 40 closes at once
        while router.connections:
            await trio.sleep(0.01)
        await trio.lowlevel.checkpoint()  # this pass counted too
    finally:
        trio.lowlevel.remove_instrument(counter)
    # 40 TLS handshakes, 40 SMP hellos made, 40 client hellos and 40 PINGs read, 40
    # connections taken apart, each kind at most two rounds' worth per pass
    kinds = ("handshake", "hello", "block", "close")
    assert [counter.total(kind) for kind in kinds] == [CROWD, CROWD, 2 * CROWD, CROWD]
    for kind in kinds:
        assert counter.most_in_a_pass(kind) <= 2 * PER_PASS, kind
    assert max(counter.passes) <= 2 * PER_PASS
    assert gate.parked - parked_before >= CROWD  # there was a crowd to hold back


async def test_a_ping_behind_a_crowd_is_answered_within_a_few_passes(
    nursery: trio.Nursery, counter: WorkCounter,
) -> None:
    gate = arrivals()
    gate.per_pass = PER_PASS
    router, port = await nursery.start(_hold_router)
    go = trio.Event()
    ready = 0
    read_at: list[int] = []

    async def crowd_client() -> None:
        nonlocal ready
        async with _connect_over_tls(port, router, version=10) as session:
            block = _ping_block(session)
            ready += 1
            await go.wait()
            await session.send_block(block)
            await session.receive()
            read_at.append(counter.index)

    async with _connect_over_tls(port, router, version=10) as pinger:
        late_ping = _ping_block(pinger)
        async with trio.open_nursery() as clients:
            for _ in range(CROWD):
                clients.start_soon(crowd_client)
            while ready < CROWD:
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked()
            trio.lowlevel.add_instrument(counter)
            go.set()
            # the crowd's blocks are on their way; the PING follows them
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()
            sent_at = counter.index
            await pinger.send_block(late_ping)
            (reply,) = await pinger.receive()
            answered_at = counter.index
            assert reply.response == PONG()
        trio.lowlevel.remove_instrument(counter)
    # the crowd took at least ten rounds of four; the PING did not wait for them
    assert max(read_at) - sent_at >= CROWD // (2 * PER_PASS)
    assert answered_at - sent_at <= 6


async def test_connections_the_router_ends_at_once_are_taken_apart_a_few_per_pass(
    nursery: trio.Nursery, counter: WorkCounter,
) -> None:
    """Not through a read (a client's close is one, above): the router cancels them."""
    gate = arrivals()
    gate.per_pass = PER_PASS
    router, port = await nursery.start(_hold_router)
    connected = 0

    async def client() -> None:
        nonlocal connected
        async with _connect_over_tls(port, router, version=10) as session:
            connected += 1
            with contextlib.suppress(TransportClosed):
                await session.receive()  # none comes: the router ends the connection

    async with trio.open_nursery() as clients:
        for _ in range(CROWD):
            clients.start_soon(client)
        while connected < CROWD or len(router.connections) < CROWD:
            await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(counter)
        for conn in list(router.connections.values()):
            conn.close_now("ended by the test")
        while router.connections:
            await trio.sleep(0.01)
        await trio.lowlevel.checkpoint()  # this pass counted too
        trio.lowlevel.remove_instrument(counter)
    assert counter.total("close") == CROWD
    assert counter.most_in_a_pass("close") <= 2 * PER_PASS


async def test_a_ping_is_read_ahead_of_a_crowd_leaving_around_it(
    nursery: trio.Nursery, counter: WorkCounter,
) -> None:
    """Clients dropping their connections (a FIN, no close_notify) before and after
    another client's PING: each is a read that finds the connection's end, and takes the
    later line (edge/arrivals.py), so the PING is not read behind those that left before
    it, while those leaving after it keep taking the newest places."""
    gate = arrivals()
    gate.per_pass = PER_PASS
    router, port = await nursery.start(_hold_router)
    before = CROWD // 2
    sessions: list[object] = []
    hold = trio.Event()

    async def crowd_client() -> None:
        async with _connect_over_tls(port, router, version=10) as session:
            sessions.append(session)
            await hold.wait()

    def drop(session: object) -> None:
        session.transport.connection.stream.transport_stream.socket.close()  # type: ignore[attr-defined]

    async with _connect_over_tls(port, router, version=10) as pinger, \
            trio.open_nursery() as clients:
        ping = _ping_block(pinger)
        for _ in range(CROWD):
            clients.start_soon(crowd_client)
        while len(sessions) < CROWD or len(router.connections) < CROWD + 1:
            await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()
        answered: list[int] = []

        async def pong() -> None:
            (reply,) = await pinger.receive()
            answered.append(counter.index)
            assert reply.response == PONG()

        clients.start_soon(pong)
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(counter)
        for session in sessions[:before]:
            drop(session)
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        sent_at = counter.index
        await pinger.send_block(ping)
        for i, session in enumerate(sessions[before:]):  # two more leave every pass
            drop(session)
            if i % 2:
                await trio.lowlevel.checkpoint()
        while len(router.connections) > 1 or not answered:
            await trio.sleep(0.01)
        await trio.lowlevel.checkpoint()  # this pass counted too
        trio.lowlevel.remove_instrument(counter)
        hold.set()
    (answered_at,) = answered
    assert counter.total("close") == CROWD
    closed_by_then = sum(kinds["close"] for kinds in counter.by_kind[:answered_at])
    assert closed_by_then < CROWD  # the crowd was still leaving
    assert answered_at - sent_at <= 6
    assert max(counter.passes) <= 2 * PER_PASS
