"""The client's own exceptions.

Nothing above the transport module sees a trio or trio-websocket exception:
`_transport` maps them once onto `ConnectionClosed`. The split follows whose
fault it is: `SMPError` is the router answering `ERR`, `ConnectionClosed` is
the connection being gone (closed locally, by the router, or broken),
`BadResponse` is the router sending something this client cannot use.
"""

from __future__ import annotations

from router.protocol.types import ErrorType


class SMPClientError(Exception):
    """Base class of every error the client raises."""


class SMPError(SMPClientError):
    """The router answered a command with `ERR error` (or the client refused it locally)."""

    def __init__(self, error: ErrorType) -> None:
        super().__init__(str(error))
        self.error = error


class ConnectionClosed(SMPClientError):
    """The connection is closed, could not be opened, or broke; pending calls fail with it."""

    def __init__(self, reason: str, *, local: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.local = local  # True when this side closed it (aclose / context exit)


class HandshakeError(ConnectionClosed):
    """The SMP handshake failed: unusable hello, no common version, wrong identity."""


class IdentityMismatch(HandshakeError):
    """The router's identity certificate does not hash to the key hash the client
    was given: a wrong address, or another router at it. Raised before the
    client sends its hello."""


class UpgradeRejected(ConnectionClosed):
    """The HTTP server refused the WebSocket upgrade (e.g. 502 or 503 from a
    reverse proxy while the router restarts, 404 for a wrong path)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class BadResponse(SMPClientError):
    """The router sent a response that does not parse or does not answer the command."""
