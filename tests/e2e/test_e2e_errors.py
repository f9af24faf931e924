"""Bad input only a socket can carry: a WebSocket message that is not one block, a text
message, a client library that finds no common version. The router's answers to bad
blocks, commands and hellos are tested without a socket in tests/router/test_router_errors.py."""

from __future__ import annotations

import pytest
import trio
from e2e_helpers import raw_connection, wait_closed

from router.client import ConnectionClosed, HandshakeError, open_client


async def test_a_message_that_is_not_one_block_closes_only_that_connection(router):
    # A WebSocket message has a size; over native TLS a short block is the start of
    # one (test_edge_native_tls_attacks: dropped at the message deadline).
    with trio.fail_after(10):
        async with open_client(router.url, router.key_hash) as client, \
                open_client(router.address) as other:
            await client.send_raw_block(b"\x00" * 100)
            with pytest.raises(ConnectionClosed):
                await client.next_event()
            await other.ping()


async def test_a_text_message_closes_the_connection(router):
    with trio.fail_after(10):
        async with raw_connection(router) as (ws, _):
            await ws.send_message("PING")
            await wait_closed(ws)
            assert ws.closed is not None


async def test_a_client_without_a_common_version_gives_up_in_the_handshake(router):
    with trio.fail_after(10), pytest.raises(HandshakeError):
        async with open_client(router.address, versions=(20, 21)):
            pass
