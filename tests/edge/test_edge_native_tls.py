"""Native SMP over TLS on the router's port, beside WebSocket
(docs/protocol.md#native-tls), checked with a client written from the
handshake's description (tls_smp_client.py)."""

from __future__ import annotations

import hashlib
import ssl

import pytest
import trio
from edge_helpers import assert_served, exchange, running_router
from tls_smp_client import IdentityMismatch, check_chain, client_context, tls_connect

from router.client import open_client
from router.protocol.block import BatchPacker
from router.protocol.transmission import encode_transmission
from router.protocol.types import Transmission
from router.protocol.versions import LEGACY_TLS_VERSION_MAX, SMP_VERSION_MAX, SMP_VERSION_MIN
from router.server.edge.native_tls import read_client_hello_offer


async def test_smp_over_tls_with_alpn_smp1_gets_every_version_and_the_identity_chain():
    async with running_router() as info:
        with trio.fail_after(10):
            connection = await tls_connect(info.port, info.key_hash)
        assert connection.alpn == "smp/1"
        assert connection.stream.version() == "TLSv1.3"
        hello = connection.server_hello
        assert (hello.min_version, hello.max_version) == (SMP_VERSION_MIN, SMP_VERSION_MAX)
        assert hello.session_id == connection.tls_unique
        # The hello's chain is the TLS chain: the online certificate, then the identity's.
        assert tuple(connection.chain) == hello.cert_chain
        assert hashlib.sha256(connection.chain[1]).digest() == info.key_hash
        await connection.aclose()


async def test_tls_1_2_is_served_with_its_own_tls_unique():
    async with running_router() as info:
        with trio.fail_after(10):
            connection = await tls_connect(
                info.port, info.key_hash, client_context(max_version=ssl.TLSVersion.TLSv1_2)
            )
        assert connection.stream.version() == "TLSv1.2"
        assert connection.server_hello.session_id == connection.tls_unique
        await connection.aclose()


async def test_every_connection_has_another_session_id():
    async with running_router() as info:
        with trio.fail_after(10):
            first = await tls_connect(info.port, info.key_hash)
            second = await tls_connect(info.port, info.key_hash)
        assert first.tls_unique != second.tls_unique
        await first.aclose()
        await second.aclose()


async def test_a_client_without_alpn_is_offered_the_legacy_range():
    async with running_router() as info:
        with trio.fail_after(10):
            connection = await tls_connect(info.port, info.key_hash, client_context(alpn=None))
        assert connection.alpn is None
        hello = connection.server_hello
        assert (hello.min_version, hello.max_version) == (SMP_VERSION_MIN, LEGACY_TLS_VERSION_MAX)
        await connection.aclose()


async def test_a_client_checking_another_key_hash_refuses_the_router():
    async with running_router() as info:
        with pytest.raises(IdentityMismatch), trio.fail_after(10):
            await tls_connect(info.port, bytes(32))


async def test_websocket_on_the_same_port_is_still_served():
    async with running_router() as info:
        await assert_served(info)


async def test_the_router_keeps_its_identity_for_tls_in_the_data_directory(tmp_path):
    async with running_router(store="journal", data_dir=tmp_path) as info:
        first = info.key_hash
        with trio.fail_after(10):
            connection = await tls_connect(info.port, first)
        await connection.aclose()
    async with running_router(store="journal", data_dir=tmp_path) as info:
        assert info.key_hash == first
        with trio.fail_after(10):
            connection = await tls_connect(info.port, first)
        check_chain(connection.chain, first)
        await connection.aclose()


def _client_hello(alpn: list[str] | None, server_name: str | None) -> bytes:
    context = client_context(alpn=alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("alpn", [["smp/1"], ["h2", "http/1.1"], ["http/1.1", "smp/1"], None])
@pytest.mark.parametrize("server_name", [None, "router.example"])
def test_the_client_hellos_alpn_and_server_name_are_read(alpn, server_name):
    offer = read_client_hello_offer(_client_hello(alpn, server_name))
    assert offer is not None
    assert offer.alpn == tuple(alpn or ())
    assert offer.server_name == (server_name is not None)


def test_a_truncated_or_foreign_first_record_is_no_offer():
    hello = _client_hello(["smp/1"], None)
    assert read_client_hello_offer(hello[:60]) is None
    assert read_client_hello_offer(b"GET / HTTP/1.1\r\n\r\n") is None


async def test_a_tls_client_that_stops_reading_is_dropped_and_others_keep_working():
    """The stalled-writer deadline over TLS, where the router writes the socket itself."""
    async with running_router(stalled_writer_timeout=0.5, send_queue_size=2) as info:
        packer = BatchPacker()
        assert packer.add(encode_transmission(Transmission(b"", b"c", b"", b"PING")))
        ping_block = packer.take_block()
        dropped = trio.Event()

        async def flood_without_reading(connection) -> None:
            # Every PING block is answered by a 16 KB block that this client never reads.
            try:
                while True:
                    await connection.send_block(ping_block)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                dropped.set()

        with trio.fail_after(30):
            connection = await tls_connect(info.port, info.key_hash)
            await connection.hello(SMP_VERSION_MIN, info.key_hash)
            async with open_client(info.address) as bystander, trio.open_nursery() as nursery:
                nursery.start_soon(flood_without_reading, connection)
                await exchange(bystander)
                await dropped.wait()
                await exchange(bystander)
                stats = info.router.statistics()
                assert stats.writers_stalled == 1 and stats.connections == 1
            await connection.aclose()
