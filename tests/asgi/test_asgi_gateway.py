"""The gateway mounted at /chat of a Starlette application under Hypercorn's
Trio worker: its pages, configuration and WebSocket under the mount path, the
host application's own routes beside them, the gateway's Origin rules, and the
application served alone."""

from __future__ import annotations

import gzip
import json
from functools import partial

import pytest
import trio
import trio_websocket
from asgi_helpers import MOUNT, AsgiRouterInfo, host_application
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from router.client import open_client
from router.gateway.asgi import GatewayApp, SMPWebSocketApp
from router.server import RouterConfig


async def http_get(
    info: AsgiRouterInfo | tuple[str, int], target: str, *headers: tuple[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """One GET; (status, headers with lower-case names, body)."""
    host, port = (info.host, info.port) if isinstance(info, AsgiRouterInfo) else info
    given = {k.lower() for k, _ in headers}
    default_host = [] if "host" in given else [f"Host: {host}:{port}"]
    lines = [f"GET {target} HTTP/1.1", *default_host, "Connection: close",
             *(f"{k}: {v}" for k, v in headers)]
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if fields.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return int(status_line.split()[1]), fields, body


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out


async def test_the_pages_and_the_websocket_are_under_the_mount_path(one_router):
    info = one_router
    status, headers, body = await http_get(info, "/")
    assert (status, body) == (200, b"the host application's own page")

    status, headers, _ = await http_get(info, f"{MOUNT}/")
    assert (status, headers["location"]) == (302, f"{MOUNT}/demo/")
    status, headers, page = await http_get(info, f"{MOUNT}/demo/")
    assert status == 200 and b"<title>SMP chat</title>" in page
    assert headers["cache-control"] == "no-cache" and headers["etag"]

    status, headers, body = await http_get(info, f"{MOUNT}/demo/config.json")
    config = json.loads(body)
    assert config["smpUrl"] == info.url
    assert config["address"] == info.address  # the key hash in base64url
    assert headers["cache-control"] == "no-store"

    status, headers, body = await http_get(info, f"{MOUNT}/smp/index.js",
                                           ("Accept-Encoding", "gzip"))
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert b"export" in gzip.decompress(body)
    again, _, _ = await http_get(info, f"{MOUNT}/smp/index.js", ("Accept-Encoding", "gzip"),
                                 ("If-None-Match", headers["etag"]))
    assert again == 304

    status, _, body = await http_get(info, f"{MOUNT}/smp")
    assert status == 426
    status, _, health = await http_get(info, f"{MOUNT}/health")
    assert status == 200 and json.loads(health)["status"] == "ok"

    async with open_client(info.address) as client:
        q = await client.create_queue(subscribe=True)
        await client.send(q.sender_id, b"under /chat")
        assert (await client.next_event()).body == b"under /chat"


async def test_a_page_of_a_foreign_origin_is_refused_before_the_upgrade(one_router):
    info = one_router
    with pytest.raises(trio_websocket.ConnectionRejected) as refused:
        async with trio_websocket.open_websocket_url(
            info.url, extra_headers=[(b"Origin", b"https://evil.example")]
        ):
            pass
    assert refused.value.status_code == 403
    status, _, _ = await http_get(info, f"{MOUNT}/health", ("Origin", "https://evil.example"))
    assert status == 403
    # The page's own origin (the Host it was loaded from) may.
    own = f"http://{info.host}:{info.port}".encode()
    async with trio_websocket.open_websocket_url(info.url, extra_headers=[(b"Origin", own)]) as ws:
        assert len(await ws.get_message()) == 16384  # the server hello
    with pytest.raises(trio_websocket.ConnectionRejected) as elsewhere:
        async with trio_websocket.open_websocket_url(info.url.replace("/smp", "/demo/")):
            pass
    assert elsewhere.value.status_code == 404


@pytest.mark.parametrize("app_kind", ["endpoint", "gateway"])
async def test_each_application_served_alone_runs_its_own_lifespan(nursery, app_kind):
    """No host application: the server's lifespan events open and close the router."""
    config = RouterConfig(host="127.0.0.1", port=0)
    app = SMPWebSocketApp(config) if app_kind == "endpoint" else GatewayApp(config)
    hypercorn = HypercornConfig()
    hypercorn.bind = ["127.0.0.1:0"]
    hypercorn.accesslog = hypercorn.errorlog = None
    stop = trio.Event()
    with trio.fail_after(20):
        done = trio.Event()

        async def run(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
            await hypercorn_serve(app, hypercorn, shutdown_trigger=stop.wait,
                                  task_status=task_status)
            done.set()

        binds = await nursery.start(run)
        port = int(binds[0].rsplit(":", 1)[1])
        path = "/smp" if app_kind == "gateway" else "/anything"
        address = app.address("127.0.0.1", port) if app_kind == "gateway" else \
            app.address("127.0.0.1", port, path)
        async with open_client(address) as client:
            await client.ping()
        router = app.router
        stop.set()
        await done.wait()
    assert router.statistics().connections == 0
    with pytest.raises(RuntimeError, match="lifespan"):
        app.router  # noqa: B018 - the router is closed with the server


async def test_without_a_lifespan_the_websocket_is_refused_not_served(nursery):
    app = SMPWebSocketApp(RouterConfig())
    events = [{"type": "websocket.connect"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return events.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "websocket", "path": "/smp"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1011}]


async def test_behind_tls_termination_the_pages_are_given_wss_urls(nursery):
    """`secure=True`: the host application is reached over https (a proxy ends
    TLS in front of Hypercorn), so config.json names wss:// under the mount path."""
    gateway = GatewayApp(RouterConfig(host="127.0.0.1", port=0), secure=True)
    hypercorn = HypercornConfig()
    hypercorn.bind = ["127.0.0.1:0"]
    hypercorn.accesslog = hypercorn.errorlog = None
    stop = trio.Event()
    app = host_application(gateway)
    with trio.fail_after(20):
        binds = await nursery.start(partial(hypercorn_serve, app, hypercorn,
                                            shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        status, _, body = await http_get(("127.0.0.1", port), f"{MOUNT}/demo/config.json",
                                         ("Host", "chat.example"))
        stop.set()
    assert status == 200
    assert json.loads(body)["smpUrl"] == f"wss://chat.example{MOUNT}/smp"
    assert json.loads(body)["address"].endswith(f"@chat.example:443{MOUNT}/smp")
