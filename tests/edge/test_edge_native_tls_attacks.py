"""The edge's attack tests against native TLS (docs/protocol.md#native-tls): the
same bounds hold as for WebSocket (hit-and-run, silent and half-open handshakes,
the caps on connections being opened and on established ones per address, the fair
drop of a full pending pool, a block that never completes, keepalive)."""

from __future__ import annotations

import socket
import ssl

import trio
from edge_helpers import (
    assert_served,
    connect_raw,
    listener,
    running_router,
    wait_closed_by_router,
)
from tls_smp_client import client_context, tls_connect

from router.protocol.block import BLOCK_SIZE

ATTACKER = "127.0.0.2"


def _client_hello() -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context().wrap_bio(incoming, outgoing)
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


async def _tls_stream(info, source: str | None = None) -> trio.SSLStream:
    """TLS done with ALPN smp/1; the router's hello not read, no client hello sent."""
    stream = trio.SSLStream(await connect_raw(info, source), client_context())
    await stream.do_handshake()
    return stream


async def test_a_hit_and_run_flood_over_tls_leaves_no_connection_behind():
    async with running_router(upgrade_timeout=30.0, handshake_timeout=30.0) as info:
        edge = listener(info)

        async def hit_and_run(n: int) -> None:
            for i in range(n):
                if i % 2:
                    stream = await connect_raw(info)
                    await stream.send_all(_client_hello()[:40])  # and gone
                    await stream.aclose()
                else:
                    tls = await _tls_stream(info)  # TLS through, then gone
                    await trio.aclose_forcefully(tls)

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(hit_and_run, 20)
            await assert_served(info)  # during the flood, over TLS
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        await assert_served(info)


async def test_a_silent_connection_is_dropped_at_the_upgrade_deadline():
    async with running_router(upgrade_timeout=1.0) as info:
        stream = await connect_raw(info)
        with trio.fail_after(1.0 + 4):
            await wait_closed_by_router(stream)


async def test_a_half_sent_tls_handshake_is_dropped_at_the_upgrade_deadline():
    async with running_router(upgrade_timeout=1.0) as info:
        stream = await connect_raw(info)
        hello = _client_hello()
        await stream.send_all(hello[: len(hello) // 2])  # and never the rest
        with trio.fail_after(1.0 + 4):
            await wait_closed_by_router(stream)
        await assert_served(info)


async def test_a_trickled_client_hello_cannot_extend_the_upgrade_deadline():
    async with running_router(upgrade_timeout=1.0) as info:
        stream = await connect_raw(info)
        hello = _client_hello()

        async def trickle() -> None:
            for byte in hello[:-1]:
                await stream.send_all(bytes([byte]))
                await trio.sleep(0.05)

        with trio.fail_after(1.0 + 4):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                await wait_closed_by_router(stream)
                nursery.cancel_scope.cancel()


async def test_tls_through_but_no_smp_hello_is_dropped_at_the_handshake_deadline():
    async with running_router(handshake_timeout=1.0) as info:
        edge = listener(info)
        tls = await _tls_stream(info)
        with trio.fail_after(1.0 + 4):
            await wait_closed_by_router(tls)  # the router's hello, then the close
            await edge.wait_connections_at_most(0)


async def test_tls_connections_being_opened_are_capped_per_address():
    async with running_router(
        upgrade_timeout=30.0, handshake_timeout=30.0, max_pending_per_address=4
    ) as info:
        edge = listener(info)
        silent = [await _tls_stream(info, ATTACKER) for _ in range(2)]  # in the SMP handshake
        silent += [await connect_raw(info, ATTACKER) for _ in range(2)]  # before TLS
        with trio.fail_after(5):
            while edge.admission.pending_from(ATTACKER) < 4:
                await trio.sleep(0.01)
        refused = await connect_raw(info, ATTACKER)
        await refused.send_all(_client_hello())
        with trio.fail_after(5):
            await wait_closed_by_router(refused)
        assert edge.refused >= 1
        await assert_served(info)  # another address is not affected
        for stream in silent:
            await trio.aclose_forcefully(stream)
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        again = await _tls_stream(info, ATTACKER)  # the address may open connections again
        await trio.aclose_forcefully(again)


async def test_established_tls_connections_are_capped_per_address():
    async with running_router(max_connections_per_address=3) as info:
        edge = listener(info)
        held = []
        with trio.fail_after(10):
            for _ in range(3):
                connection = await tls_connect(info.port, info.key_hash, source=ATTACKER)
                await connection.hello(10, info.key_hash)
                held.append(connection)
            while edge.admission.pending_from(ATTACKER):  # each handshake through
                await trio.sleep(0.01)
        assert edge.admission.open_from(ATTACKER) == 3
        refused = await connect_raw(info, ATTACKER)
        await refused.send_all(_client_hello())
        with trio.fail_after(5):
            await wait_closed_by_router(refused)
        assert edge.refused >= 1
        await assert_served(info)  # another address is not affected
        for connection in held:
            await connection.aclose()
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        assert edge.admission.open_from(ATTACKER) == 0


async def test_a_full_pool_drops_the_oldest_pending_tls_connection_for_a_newcomer():
    async with running_router(
        upgrade_timeout=30.0, handshake_timeout=30.0, max_pending=4, max_pending_per_address=4
    ) as info:
        edge = listener(info)
        held = [await _tls_stream(info, ATTACKER) for _ in range(4)]  # in the SMP handshake
        with trio.fail_after(5):
            while edge.admission.pending_from(ATTACKER) < 4:
                await trio.sleep(0.01)
        await assert_served(info)  # from 127.0.0.1, in place of the attacker's oldest
        assert edge.admission.evicted >= 1
        with trio.fail_after(5):
            await wait_closed_by_router(held[0])
        for stream in held:
            await trio.aclose_forcefully(stream)


async def test_a_block_that_never_completes_is_dropped_at_the_message_deadline():
    async with running_router(message_timeout=1.0) as info:
        with trio.fail_after(10):
            connection = await tls_connect(info.port, info.key_hash)
            await connection.hello(10, info.key_hash)
        await connection.stream.send_all(b"\0" * (BLOCK_SIZE // 2))  # half a block
        with trio.fail_after(1.0 + 4):
            await wait_closed_by_router(connection.stream)


async def test_an_established_tls_connection_is_kept_alive_by_tcp_keepalive():
    async with running_router(keepalive_interval=7.0, keepalive_timeout=6.0) as info:
        with trio.fail_after(10):
            connection = await tls_connect(info.port, info.key_hash)
            await connection.hello(10, info.key_hash)
            while not info.router.connection_for_session(connection.tls_unique):
                await trio.sleep(0.01)
        conn = info.router.connection_for_session(connection.tls_unique)
        tls_transport = conn.transport.inner  # under the suspend gate (gate.py)
        sock = tls_transport._stream.transport_stream.socket
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
        probes = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
        assert probes * sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 6
        await connection.aclose()
