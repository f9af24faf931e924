"""Ending a connection: nobody waits forever, whichever side ends it and however."""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing
from smp_fake_peer import PeerConnection, fake_peer, fake_queue, sealed

from router.client import ConnectionClosed, format_address, open_client
from router.protocol import pad_block
from router.protocol.types import PONG


async def test_a_router_that_closes_fails_the_waiting_caller_and_later_calls():
    async def script(conn: PeerConnection) -> None:
        await conn.receive_commands(1)
        await conn.ws.aclose()

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ConnectionClosed) as e:
                await c.ping()
            assert not e.value.local
            with pytest.raises(ConnectionClosed):
                await c.ping()
            with pytest.raises(ConnectionClosed):
                await c.next_event()
            assert c.closed is not None


async def test_a_wrong_key_hash_makes_the_router_close_and_the_first_call_fail():
    with trio.fail_after(10):
        async with fake_peer(lambda conn: trio.sleep_forever()) as peer:
            async with open_client(peer.url, bytes(32)) as c:
                with pytest.raises(ConnectionClosed):
                    await c.ping()


async def test_closing_the_client_fails_callers_in_other_tasks_as_closed_locally():
    errors: list[ConnectionClosed] = []

    async def script(conn: PeerConnection) -> None:
        await trio.sleep_forever()  # never answers

    async def waiting_ping(client, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await client.ping()
        except ConnectionClosed as e:
            errors.append(e)

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            async with trio.open_nursery() as nursery:
                await nursery.start(waiting_ping, c)
                await trio.testing.wait_all_tasks_blocked()
                await c.aclose()
            await c.aclose()  # idempotent
    assert len(errors) == 1 and errors[0].local


async def test_events_already_received_can_still_be_read_after_the_router_leaves():
    q = fake_queue()
    msg = sealed(q, b"last words")

    async def script(conn: PeerConnection) -> None:
        await conn.send([(b"", q.recipient_id, msg)])
        await conn.ws.aclose()

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            assert (await c.next_event()).body == b"last words"
            with pytest.raises(ConnectionClosed):
                async for _ in c.events():
                    pass  # pragma: no cover - nothing more arrives


async def test_a_malformed_block_from_the_router_ends_the_connection():
    async def script(conn: PeerConnection) -> None:
        await conn.receive_commands(1)
        await conn.ws.send_message(pad_block(b"\x00"))  # a batch of zero transmissions

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ConnectionClosed, match="bad block"):
                await c.ping()


async def test_a_message_that_is_not_one_block_ends_the_connection():
    async def script(conn: PeerConnection) -> None:
        await conn.receive_commands(1)
        await conn.ws.send_message(b"short")

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ConnectionClosed, match="not a block"):
                await c.ping()


async def test_an_unreachable_router_is_a_connection_error():
    with trio.fail_after(10):
        async with fake_peer(lambda conn: trio.sleep_forever()) as peer:
            port = peer.port
        with pytest.raises(ConnectionClosed, match="cannot connect"):
            async with open_client(f"ws://127.0.0.1:{port}", key_hash=bytes(32)):
                pass  # pragma: no cover - never reached


async def test_an_error_raised_in_the_client_block_propagates_unwrapped():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, b"", PONG())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer:
            with pytest.raises(KeyError):
                async with open_client(peer.address) as c:
                    await c.ping()
                    raise KeyError("mine")


@pytest.mark.parametrize("reads_the_request", [False, True])
async def test_a_router_that_closes_before_answering_the_upgrade_fails_the_connect(
    monkeypatch, reads_the_request
):
    """A router at its limits may close a connection before it answers the
    upgrade; the client gives up within its connect timeout instead of waiting
    for ever (and an agent then tries again)."""
    monkeypatch.setattr("router.client._transport.CONNECT_TIMEOUT", 0.5)

    async def close_at_once(stream: trio.SocketStream) -> None:
        if reads_the_request:
            await stream.receive_some(4096)
        await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_tcp, close_at_once, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        with trio.fail_after(10), pytest.raises(ConnectionClosed):
            async with open_client(format_address(bytes(32), "127.0.0.1", port)):
                pass
        nursery.cancel_scope.cancel()
