"""Opening the router's TCP listeners, with start-up failures that name the address.

Every port the router opens (its own, the metrics port, the control port)
goes through `open_listeners`, so that "address in use", "cannot assign
requested address" and an unknown host all end as one `StartupError` line
naming `host:port` and what the port was for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

from ..settings.config import StartupError, find_os_error, os_error_reason
from .identity import host_port


@contextmanager
def naming_address(what: str, host: str, port: int) -> Iterator[None]:
    """Turn an OSError raised while binding into a StartupError naming the address."""
    try:
        yield
    except BaseException as e:
        os_error = find_os_error(e)
        if os_error is None:
            raise
        raise StartupError(
            f"cannot listen on {host_port(host, port)} for {what}: {os_error_reason(os_error)}"
        ) from os_error


async def open_listeners(what: str, host: str, port: int) -> list[trio.SocketListener]:
    with naming_address(what, host, port):
        return await trio.open_tcp_listeners(port, host=host)


def bound_port(listeners: list[trio.SocketListener]) -> int:
    return int(listeners[0].socket.getsockname()[1])
