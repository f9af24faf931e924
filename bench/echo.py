"""The throughput ceiling: a plain trio-websocket server that echoes every message.

    python -m bench.echo [--port 0] [--server trio-websocket|edge]

prints ``echo listening on ws://127.0.0.1:PORT`` and echoes binary messages
back until terminated. It uses the router's own WebSocket settings (receive
buffer, message queue, message size limit), so the difference between the
router and this server is the router's work, not the library's tuning.
`--server edge` echoes blocks through the router's own listener
(`router.server.edge.listener`) instead: the difference between the two echoes is the
framing layer's.
"""

from __future__ import annotations

import argparse
import signal
from functools import partial

import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from router.protocol.block import BLOCK_SIZE
from router.server.edge.block_stream import MESSAGE_QUEUE_SIZE, RECEIVE_BUFFER_SIZE, TransportClosed
from router.server.edge.listener import serve_edge
from router.server.edge.websocket import WebSocketTransport

SERVERS = ("trio-websocket", "edge")


async def _echo(request: WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            await ws.send_message(await ws.get_message())
    except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _echo_blocks(transport: WebSocketTransport, scope: object = None) -> None:
    transport.established()
    try:
        while True:
            await transport.send_block(await transport.receive_block())
    except TransportClosed:
        pass
    finally:
        await transport.aclose(0)


async def start_echo(nursery: trio.Nursery, host: str, port: int, kind: str) -> int:
    """The echo server of `kind` listening in `nursery`; its port."""
    if kind == "edge":
        listener = await nursery.start(partial(serve_edge, _echo_blocks, host, port))
        return int(listener.port)
    server = await nursery.start(partial(
        serve_websocket, _echo, host, port, None,
        message_queue_size=MESSAGE_QUEUE_SIZE,
        max_message_size=BLOCK_SIZE,
        receive_buffer_size=RECEIVE_BUFFER_SIZE,
    ))
    return int(server.port)


async def _main(host: str, port: int, kind: str) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            port = await start_echo(nursery, host, port, kind)
            print(f"echo listening on ws://{host}:{port}", flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.echo")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--server", choices=SERVERS, default="trio-websocket")
    args = parser.parse_args()
    trio.run(_main, args.host, args.port, args.server)


if __name__ == "__main__":
    main()
