"""The ASGI block transport (router.server.edge.asgi) on its own, with scripted
ASGI events, and a client that stops reading behind Hypercorn."""

from __future__ import annotations

import pytest
import trio
import trio.testing
import trio_websocket
from e2e_helpers import raw_block, raw_connection

from router.client import open_client
from router.protocol.block import BLOCK_SIZE
from router.protocol.types import Transmission
from router.server.edge.asgi import ASGIBlockTransport, asgi_remote, serve_asgi_websocket
from router.server.edge.block_stream import TransportClosed


class ScriptedPeer:
    """The server's side of `receive` and `send`: events given in order; what was sent."""

    def __init__(self, *events: dict) -> None:
        self.events = list(events)
        self.sent: list[dict] = []
        self.write_gate: trio.Event | None = None  # set: writes wait for it (a peer not reading)

    async def receive(self) -> dict:
        await trio.lowlevel.checkpoint()
        if not self.events:
            await trio.sleep_forever()
        return self.events.pop(0)

    async def send(self, message: dict) -> None:
        if self.write_gate is not None:
            with trio.CancelScope(shield=True):  # as Hypercorn writes
                await self.write_gate.wait()
        self.sent.append(message)


def block(byte: int = 1) -> bytes:
    return bytes([byte]) * BLOCK_SIZE


async def test_blocks_in_and_out_and_the_close(nursery):
    peer = ScriptedPeer({"type": "websocket.receive", "bytes": block(7)})
    transport = ASGIBlockTransport(peer.receive, peer.send, "t", stalled_timeout=5)
    nursery.start_soon(transport.run_writer)
    assert await transport.receive_block() == block(7)
    await transport.send_blocks([block(1), block(2)])
    await transport.aclose(5)
    await trio.testing.wait_all_tasks_blocked()
    assert [m["type"] for m in peer.sent] == ["websocket.send", "websocket.send", "websocket.close"]
    assert peer.sent[1]["bytes"] == block(2) and peer.sent[2]["code"] == 1000
    with pytest.raises(TransportClosed):
        await transport.send_block(block())


@pytest.mark.parametrize(("event", "why"), [
    ({"type": "websocket.receive", "text": "hello"}, "text message"),
    ({"type": "websocket.receive", "bytes": b"x" * 100}, "100 bytes"),
    ({"type": "websocket.disconnect", "code": 1001}, "closed the connection"),
    ({"type": "websocket.connect"}, "unexpected ASGI event"),
])
async def test_anything_but_a_block_ends_the_connection(event, why):
    peer = ScriptedPeer(event)
    transport = ASGIBlockTransport(peer.receive, peer.send, "t")
    with pytest.raises(TransportClosed, match=why):
        await transport.receive_block()


async def test_a_peer_that_does_not_take_blocks_is_stalled_even_if_writes_cannot_be_cancelled(
    nursery,
):
    peer = ScriptedPeer()
    peer.write_gate = trio.Event()
    transport = ASGIBlockTransport(peer.receive, peer.send, "t", stalled_timeout=0.2)
    nursery.start_soon(transport.run_writer)
    await transport.send_block(block(1))  # taken by the writer, whose write then hangs
    with trio.fail_after(5), pytest.raises(TransportClosed, match="did not read"):
        await transport.send_block(block(2))
    assert transport.stalled
    await transport.aclose(5)  # no close frame for a stalled peer: the writer just ends
    peer.write_gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert [m["type"] for m in peer.sent] == ["websocket.send"]


async def test_a_client_leaving_before_connect_is_not_accepted():
    peer = ScriptedPeer({"type": "websocket.disconnect", "code": 1006})
    served = []

    async def serve(transport):
        served.append(transport)

    await serve_asgi_websocket(serve, {"type": "websocket"}, peer.receive, peer.send)
    assert served == [] and peer.sent == []


def test_the_remote_is_named_as_the_server_saw_it():
    assert asgi_remote({"client": ("127.0.0.1", 5000)}) == "127.0.0.1:5000"
    assert asgi_remote({"client": ("::1", 5000)}) == "[::1]:5000"
    assert asgi_remote({}) == "?"


async def test_a_client_that_stops_reading_is_dropped_by_the_router_behind_hypercorn(
    router_factory,
):
    """tests/e2e/test_e2e_stalled.py behind Hypercorn: the router drops the
    client (its subscriptions end, writers_stalled counts it) and everybody else
    goes on. Hypercorn writes to the socket in a scope that cannot be cancelled,
    so the TCP connection of that client stays until it ends it (here, the test)."""
    info = await router_factory(stalled_writer_timeout=0.5, send_queue_size=2)
    ping_block = raw_block(Transmission(b"", b"c", b"", b"PING"))

    async def flood_without_reading(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with raw_connection(info, message_queue_size=1) as (ws, _):
            task_status.started()
            try:
                while True:
                    await ws.send_message(ping_block)
            except trio_websocket.ConnectionClosed:
                pass

    with trio.fail_after(30):
        async with open_client(info.address) as bystander, trio.open_nursery() as nursery:
            await nursery.start(flood_without_reading)
            q = await bystander.create_queue(subscribe=True)
            await bystander.send(q.sender_id, b"while the other one stalls")
            assert (await bystander.next_event()).body == b"while the other one stalls"
            while info.router.statistics().writers_stalled < 1:
                await trio.sleep(0.05)
            await bystander.ping()
            stats = info.router.statistics()
            assert stats.writers_stalled == 1 and stats.connections == 1
            nursery.cancel_scope.cancel()  # the flooding client goes away
