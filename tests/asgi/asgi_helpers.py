"""What the ASGI tests share: the host application (a Starlette application
with the gateway mounted at MOUNT), serving it with Hypercorn's Trio worker on
127.0.0.1, and what a test knows of it (`AsgiRouterInfo`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import partial

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from router.gateway.asgi import GatewayApp
from router.server import Router, RouterConfig

MOUNT = "/chat"
TEST_DEFAULTS: dict[str, object] = {"host": "127.0.0.1", "port": 0, "end_batch_interval": 0.02}


@dataclass(frozen=True)
class AsgiRouterInfo:
    host: str
    port: int
    router: Router
    mount: str = MOUNT

    @property
    def key_hash(self) -> bytes:
        return self.router.key_hash

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{self.mount}/smp"

    @property
    def address(self) -> str:
        key = base64.urlsafe_b64encode(self.key_hash).decode("ascii")
        return f"smp://{key}@{self.host}:{self.port}{self.mount}/smp"


async def host_home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host application's own page")


def host_application(gateway: GatewayApp) -> Starlette:
    """A web application of its own, with the gateway mounted at MOUNT."""
    return Starlette(routes=[Route("/", host_home), Mount(MOUNT, app=gateway)],
                     lifespan=gateway.lifespan)


async def serve_asgi_router(
    config: RouterConfig, *,
    task_status: trio.TaskStatus[AsgiRouterInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hypercorn (its Trio serve) with the host application on a loopback port,
    until cancelled; reports where the router is once it accepts."""
    gateway = GatewayApp(config)
    hypercorn = HypercornConfig()
    hypercorn.bind = ["127.0.0.1:0"]
    hypercorn.accesslog = None
    hypercorn.errorlog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(
            hypercorn_serve, host_application(gateway), hypercorn, shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        task_status.started(AsgiRouterInfo("127.0.0.1", port, gateway.router))
        try:
            await trio.sleep_forever()
        finally:
            stop.set()
