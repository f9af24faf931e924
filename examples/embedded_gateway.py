"""A gateway that runs the SMP router inside its own Trio program.

The gateway accepts WebSockets itself and routes them by path:

    ws://HOST:PORT/smp     handed to the router (`handle_websocket`)
    ws://HOST:PORT/stats   one text message: the router's statistics as JSON

and serves a small HTTP health page on a second port:

    http://HOST:HEALTH_PORT/   200, {"status": "ok", ...statistics}

Run it:

    python examples/embedded_gateway.py --port 8080 --health-port 8081

It prints one line with the URLs and the router's address,
``smp://<keyHash>@HOST:PORT/smp`` (the key hash in base64url, as in every SMP
address); an SMP client connects with ``open_client(address)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
from dataclasses import dataclass
from functools import partial

import trio
from trio_websocket import WebSocketRequest, serve_websocket

from router.client import format_address
from router.server import Router, RouterConfig, handle_websocket, open_router

SMP_PATH = "/smp"
STATS_PATH = "/stats"
MAX_REQUEST_HEAD = 8192
HTTP_TIMEOUT = 5.0


@dataclass(frozen=True)
class GatewayInfo:
    smp_url: str
    stats_url: str
    health_url: str
    address: str  # smp://<base64url key hash>@host:port/smp
    key_hash: bytes
    router: Router


def statistics_json(router: Router) -> str:
    return json.dumps(dataclasses.asdict(router.statistics()))


async def route_websocket(router: Router, request: WebSocketRequest) -> None:
    # Route by the path alone: SMP clients put a challenge in the query
    # (docs/protocol.md#web-identity-proof).
    path = request.path.partition("?")[0]
    if path == SMP_PATH:
        await handle_websocket(router, await request.accept())
    elif path == STATS_PATH:
        ws = await request.accept()
        await ws.send_message(statistics_json(router))
        await ws.aclose()
    else:
        await request.reject(404)


async def serve_health_page(router: Router, stream: trio.SocketStream) -> None:
    """Answer one HTTP request on `stream` with the health JSON, then close."""
    head = b""
    with trio.move_on_after(HTTP_TIMEOUT):
        while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST_HEAD:
            chunk = await stream.receive_some(1024)
            if not chunk:
                break
            head += chunk
    body = json.dumps({"status": "ok", **json.loads(statistics_json(router))}).encode()
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    try:
        await stream.send_all(response)
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


async def run_gateway(
    host: str = "127.0.0.1",
    port: int = 0,
    health_port: int = 0,
    config: RouterConfig | None = None,
    *,
    task_status: trio.TaskStatus[GatewayInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the router and both front ends until cancelled."""
    async with open_router(config or RouterConfig()) as router, trio.open_nursery() as nursery:
        ws_server = await nursery.start(
            partial(serve_websocket, partial(route_websocket, router), host, port, None)
        )
        listeners = await nursery.start(
            partial(trio.serve_tcp, partial(serve_health_page, router), health_port, host=host)
        )
        ws_port = ws_server.port
        http_port = listeners[0].socket.getsockname()[1]
        task_status.started(GatewayInfo(
            smp_url=f"ws://{host}:{ws_port}{SMP_PATH}",
            stats_url=f"ws://{host}:{ws_port}{STATS_PATH}",
            health_url=f"http://{host}:{http_port}/",
            address=format_address(router.key_hash, host, ws_port, SMP_PATH),
            key_hash=router.key_hash,
            router=router,
        ))


async def main(host: str, port: int, health_port: int) -> None:
    """Run until SIGINT or SIGTERM, then stop everything through the nursery."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            info: GatewayInfo = await nursery.start(run_gateway, host, port, health_port)
            print(
                f"gateway: SMP at {info.smp_url} address {info.address}, "
                f"statistics at {info.stats_url}, health at {info.health_url}",
                flush=True,
            )
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--health-port", type=int, default=8081)
    args = parser.parse_args()
    trio.run(main, args.host, args.port, args.health_port)
