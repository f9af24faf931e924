"""The router inside a Python web application: ASGI applications for
Starlette, FastAPI or Quart, served by Hypercorn with its Trio worker.

The router runs on Trio, so the ASGI server must run the application on Trio
too: `hypercorn --worker-class trio module:app`, or `hypercorn.trio.serve`
from a Trio program. Two applications:

`SMPWebSocketApp` is the router's WebSocket endpoint alone: every WebSocket it
is given is an SMP connection.

    smp = SMPWebSocketApp(RouterConfig(store="sqlite", data_dir=Path("/var/lib/smp")))
    app = Starlette(routes=[WebSocketRoute("/smp", smp)], lifespan=smp.lifespan)

`GatewayApp` is the whole gateway (docs/gateway.md) at a path of the host
application: the demo, the client module, `config.json`, `/health` and the SMP
WebSocket, with the same answers, caching and Origin checks as `smp-router
gateway`, all under the mount path.

    gateway = GatewayApp(RouterConfig(store="memory"), allow_origins=("https://chat.example",))
    app = Starlette(routes=[Mount("/chat", app=gateway)], lifespan=gateway.lifespan)
    # pages at /chat/demo/, the SMP WebSocket at /chat/smp

`lifespan` opens the router (stores, identity, background tasks) when the
server starts and closes it when the server stops. Frameworks do not pass
lifespan events to mounted applications, hence `lifespan=` on the host
application; served alone, each application answers the events itself.
`address(host, port)` is the address clients use: the key hash in base64url,
as in every SMP address.

Each accepted WebSocket reaches the router's own connection code through the
block transport of router.server.edge.asgi. The router's listener limits
(connection caps, upgrade deadlines, TLS) are the ASGI server's business here;
the router's command limits, quotas and stalled-writer timeout apply as always.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path

from router.server import Router, RouterConfig, open_router
from router.server.edge.asgi import Receive, Scope, Send, asgi_remote, serve_asgi_websocket
from router.server.edge.http import ACCEPT_WEBSOCKET, HttpRequest, HttpResponse

from .origins import OriginPolicy, normalize_origin
from .server import DEFAULT_WEB_ROOT, missing_web_files, site_root, statistics_of
from .site import SMP_PATH, GatewaySite, SiteConfig

INTERNAL_ERROR = 1011  # WebSocket close code: the server cannot serve it


class RouterNotRunning(RuntimeError):
    """The router runs only inside the application's lifespan."""


class SMPWebSocketApp:
    """An ASGI application: each WebSocket it gets is an SMP connection to the router."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._router: Router | None = None

    @property
    def router(self) -> Router:
        if self._router is None:
            raise RouterNotRunning("the router runs only inside the application's lifespan")
        return self._router

    @property
    def key_hash(self) -> bytes:
        return self.router.key_hash

    def address(self, host: str, port: int, path: str = "/smp") -> str:
        """`smp://<keyHash>@host:port/path`, the key hash in base64url ('=' padded)."""
        return self.router.identity.address(host, port) + path

    @asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Run the router for the server's lifetime (Starlette's `lifespan=`)."""
        async with open_router(self.config) as router:
            self._router = router
            try:
                yield
            finally:
                self._router = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await lifespan_events(self.lifespan, receive, send)
        elif kind == "websocket":
            await self.serve_websocket(scope, receive, send)
        elif kind == "http":
            await send_response(send, HttpResponse(
                426, b"the SMP WebSocket: upgrade required\n", headers=(("upgrade", "websocket"),)
            ))

    async def serve_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        router = self._router
        if router is None:  # no lifespan ran: refuse, rather than fail half-way
            await receive()
            await send({"type": "websocket.close", "code": INTERNAL_ERROR})
            return
        await serve_asgi_websocket(router.serve_transport, scope, receive, send,
                                   stalled_timeout=self.config.stalled_writer_timeout)


class GatewayApp:
    """An ASGI application: the gateway's site and the router's WebSocket, at a mount path."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        allow_origins: tuple[str, ...] = (),
        web_root: Path = DEFAULT_WEB_ROOT,
        secure: bool = False,
    ) -> None:
        """`allow_origins`: page origins besides the host's own that may open the
        WebSocket (docs/gateway.md, "Origins"); `web_root`: the built web client
        (its `dist/site`); `secure`: the pages are served over https, so the
        WebSocket URLs they are given are wss://."""
        self.smp = SMPWebSocketApp(config)
        self.web_root = web_root
        self.secure = secure
        self.origins = OriginPolicy(tuple(normalize_origin(o) for o in allow_origins),
                                    secure=secure)
        self._site: GatewaySite | None = None

    @property
    def router(self) -> Router:
        return self.smp.router

    def address(self, host: str, port: int, mount_path: str = "") -> str:
        return self.smp.address(host, port, mount_path + SMP_PATH)

    def missing_files(self) -> list[str]:
        """What the web build lacks (pages for those answer 404)."""
        return missing_web_files(self.web_root)

    @asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Run the router for the server's lifetime (Starlette's `lifespan=`)."""
        async with self.smp.lifespan(app):
            router = self.smp.router
            config = SiteConfig(site_root(self.web_root), router.key_hash, self.origins,
                                self.secure)
            self._site = GatewaySite(config, partial(statistics_of, router))
            try:
                yield
            finally:
                self._site = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await lifespan_events(self.lifespan, receive, send)
            return
        if kind not in ("http", "websocket"):
            return
        site = self._site
        if site is None:
            if kind == "http":
                await send_response(send, HttpResponse(503, b"the router is not running\n"))
            else:
                await self.smp.serve_websocket(scope, receive, send)  # refuses it
            return
        answer = await site(site_request(scope), mount_path=scope.get("root_path", ""))
        if kind == "http":
            assert isinstance(answer, HttpResponse)
            await send_response(send, answer)
        elif answer is ACCEPT_WEBSOCKET:
            await self.smp.serve_websocket(scope, receive, send)
        else:
            await refuse_websocket(scope, receive, send, answer)


def route_path(scope: Scope) -> str:
    """The request's path below the mount point (`root_path`), as frameworks route it."""
    path: str = scope.get("path") or "/"
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"


def site_request(scope: Scope) -> HttpRequest:
    """The request as the gateway's site sees it: the target below the mount point."""
    headers = tuple((name.decode("latin-1").lower(), value.decode("latin-1"))
                    for name, value in scope.get("headers", ()))
    query = scope.get("query_string", b"").decode("latin-1")
    target = route_path(scope) + (f"?{query}" if query else "")
    upgrade = scope["type"] == "websocket"
    method = "GET" if upgrade else scope.get("method", "GET")
    return HttpRequest(method, target, headers, asgi_remote(scope), upgrade)


async def send_response(send: Send, response: HttpResponse) -> None:
    """An `HttpResponse` of the site as ASGI events."""
    headers = [(b"content-type", response.content_type.encode("latin-1")),
               (b"content-length", str(len(response.body)).encode("ascii"))]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def refuse_websocket(scope: Scope, receive: Receive, send: Send, answer: object) -> None:
    """Refuse an upgrade the site refused: with its status and text where the server
    lets an application answer a WebSocket with HTTP, else with the server's 403."""
    await receive()  # websocket.connect
    if isinstance(answer, HttpResponse) and "websocket.http.response" in scope.get(
        "extensions", {}
    ):
        headers = [(b"content-type", answer.content_type.encode("latin-1"))]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        await send({"type": "websocket.http.response.start", "status": answer.status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": answer.body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def lifespan_events(
    lifespan: Callable[[], AbstractAsyncContextManager[None]], receive: Receive, send: Send
) -> None:
    """The ASGI lifespan protocol for an application served alone: `lifespan`
    runs from the startup event to the shutdown event."""
    if (await receive())["type"] != "lifespan.startup":
        return
    started = False
    try:
        async with lifespan():
            started = True
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
    except Exception as e:
        kind = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
        await send({"type": kind, "message": f"{type(e).__name__}: {e}"})
        return
    await send({"type": "lifespan.shutdown.complete"})
