"""A client that stops reading is dropped after the deadline; nobody else notices."""

from __future__ import annotations

import trio
import trio_websocket
from e2e_helpers import raw_block, raw_connection

from router.client import open_client
from router.protocol.types import Transmission


async def test_a_client_that_stops_reading_is_dropped_and_others_keep_working(router_factory):
    info = await router_factory(stalled_writer_timeout=0.5, send_queue_size=2)
    ping_block = raw_block(Transmission(b"", b"c", b"", b"PING"))
    dropped = trio.Event()

    async def flood_without_reading(ws: trio_websocket.WebSocketConnection) -> None:
        # Every PING block is answered by a 16 KB block that this client never reads.
        try:
            while True:
                await ws.send_message(ping_block)
        except trio_websocket.ConnectionClosed:
            dropped.set()

    with trio.fail_after(30):
        async with (
            open_client(info.address) as bystander,
            raw_connection(info, message_queue_size=1) as (ws, _),
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(flood_without_reading, ws)
            q = await bystander.create_queue(subscribe=True)
            await bystander.send(q.sender_id, b"while the other one stalls")
            assert (await bystander.next_event()).body == b"while the other one stalls"
            await dropped.wait()
            await bystander.ping()
            stats = info.router.statistics()
            assert stats.writers_stalled == 1 and stats.connections == 1
