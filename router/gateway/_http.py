"""The HTTP request and response records of the router's listener (edge.py),
under the names the gateway uses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    remote: str
    is_websocket_upgrade: bool

    def header(self, name: str) -> str | None:
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


ACCEPT_WEBSOCKET: object = object()
