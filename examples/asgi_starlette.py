"""A Starlette web application with the SMP router inside it, on Hypercorn's Trio worker.

The application has pages of its own and mounts the gateway (router.gateway.asgi)
at /chat:

    http://HOST:PORT/              the application's own page
    http://HOST:PORT/chat/demo/    the demo chat, served by the gateway
    ws://HOST:PORT/chat/smp        the SMP WebSocket (the router)

Run it from a checkout, with the `asgi` extra (`pip install -e '.[asgi]'`) and after
`npm ci --prefix web`, which builds the pages:

    python examples/asgi_starlette.py --port 8000

or with Hypercorn's command line, which must use the Trio worker:

    hypercorn --worker-class trio --bind 127.0.0.1:8000 examples.asgi_starlette:app

Run as a script it prints one line once it accepts, with the router's address
(the key hash in base64url, as in every SMP address); a Python client connects
with ``open_client(address)``, a page with the `smpUrl` of /chat/demo/config.json.
"""

from __future__ import annotations

import argparse
import signal
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route

from router.gateway.asgi import GatewayApp
from router.server import RouterConfig

MOUNT = "/chat"

gateway = GatewayApp(RouterConfig(store="memory"))


async def home(request: Request) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><title>My application</title><h1>My application</h1>"
        f'<p>Its chat: <a href="{MOUNT}/demo/">{MOUNT}/demo/</a></p>'
    )


app = Starlette(routes=[Route("/", home), Mount(MOUNT, app=gateway)], lifespan=gateway.lifespan)


async def main(host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM; print the addresses once accepting."""
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
            bound_port = int(binds[0].rsplit(":", 1)[1])
            print(f"asgi example serving http://{host}:{bound_port}/ chat at "
                  f"http://{host}:{bound_port}{MOUNT}/demo/ address "
                  f"{gateway.address(host, bound_port, MOUNT)}", flush=True)
            async for _ in signals:
                break
            stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    trio.run(main, args.host, args.port)
