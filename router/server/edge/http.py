"""The HTTP side of the edge: the request a hook is shown, the answer it gives,
and reading a request head within a size bound (the parsing is `websockets`').
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

import trio
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

from .block_stream import RECEIVE_BUFFER_SIZE


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str  # "GET", ...
    target: str  # path and query, e.g. "/smp" or "/"
    headers: tuple[tuple[str, str], ...]  # names lower-cased
    remote: str  # "host:port" of the peer
    is_websocket_upgrade: bool

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class _AcceptWebSocket:
    def __repr__(self) -> str:
        return "ACCEPT_WEBSOCKET"


ACCEPT_WEBSOCKET: object = _AcceptWebSocket()
"""What a request hook returns to have the edge complete the WebSocket upgrade."""

RequestHook = Callable[[HttpRequest], Awaitable["HttpResponse | object"]]


async def accept_every_upgrade(request: HttpRequest) -> HttpResponse | object:
    """A request hook: every upgrade is accepted, every plain request gets 404."""
    if request.is_websocket_upgrade:
        return ACCEPT_WEBSOCKET
    return HttpResponse(404, b"Not Found\n")



class BadRequest(Exception):
    def __init__(self, reason: str, response: bytes = b"") -> None:
        super().__init__(reason)
        self.response = response


async def read_request_head(
    stream: trio.abc.Stream, protocol: ServerProtocol, max_bytes: int
) -> tuple[Request, list[object]]:
    """Feed the protocol until it has the request; the frames that came with it too."""
    received = 0
    while True:
        data = await stream.receive_some(RECEIVE_BUFFER_SIZE)
        if not data:
            raise BadRequest("closed before the request was complete")
        received += len(data)
        protocol.receive_data(data)
        events = protocol.events_received()
        if events and isinstance(events[0], Request):
            return events[0], events[1:]
        if protocol.handshake_exc is not None:
            raise BadRequest(str(protocol.handshake_exc), b"".join(protocol.data_to_send()))
        if received > max_bytes:
            raise BadRequest(
                "request head too large",
                serialize_response(HttpResponse(431, b"Request header fields too large\n")),
            )


def request_for_hook(request: Request, remote: str) -> HttpRequest:
    headers = tuple((name.lower(), value) for name, value in request.headers.raw_items())
    upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
    connection = request.headers.get("Connection", "").lower()
    return HttpRequest(
        method=request.method,
        target=request.path,
        headers=headers,
        remote=remote,
        is_websocket_upgrade=upgrade and "upgrade" in connection,
    )


def serialize_response(response: HttpResponse) -> bytes:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    headers = Headers()
    headers["Content-Type"] = response.content_type
    headers["Content-Length"] = str(len(response.body))
    headers["Connection"] = "close"
    for name, value in response.headers:
        headers[name] = value
    return Response(response.status, reason, headers, response.body).serialize()


def drop_header(response: Response, name: str) -> None:
    if name in response.headers:
        del response.headers[name]
