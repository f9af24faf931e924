"""A worker's answers to its supervisor's operation ports
(docs/workers.md#one-router-to-the-operator).

With several workers the supervisor serves the control port and the metrics
port for the router as a whole (operator.py) and asks every worker. Each
worker answers on a Unix stream socket in the abstract namespace named after
its supervisor and its index, to processes of its own user only
(`SO_PEERCRED`): one request per connection, one line, and the answer until
the worker closes it.

    control LINE        the answer lines of a control command run with the admin
                        role (the supervisor checked the session's role)
    page METHOD TARGET  the metrics port's page: its status line, its content
                        type line, then its body
    stats               the figures of the supervisor's one stats log (workers/stats.py):
                        one JSON line, the worker's pid, its `RouterStatistics` and the
                        sketch of the queues active since the last `stats` (then cleared)
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from contextlib import AsyncExitStack
from dataclasses import asdict

import trio

from ..edge.block_stream import STREAM_GONE
from ..ops.control import ControlSession, Role
from ..ops.metrics import Pages, open_pages
from ..ops.operated import OperatedRouter

log = logging.getLogger(__name__)

_PEERCRED = struct.Struct("3i")  # pid, uid, gid
MAX_REQUEST = 8192  # bytes of a request line
REQUEST_TIMEOUT = 10.0  # seconds the supervisor has to send its request


def operations_address(group: str, index: int) -> bytes:
    """The abstract socket name of worker `index`'s answers, for its supervisor."""
    return f"\0smp-router.{group}.operations-{index}".encode()


async def serve_operations(
    router: OperatedRouter, group: str, index: int, *, metrics: bool,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer the supervisor's requests about this worker until cancelled; its metrics
    pages only if the router has a metrics port (making them counts the stored queues)."""
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        await listener.bind(operations_address(group, index))
        listener.listen(16)
        async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
            pages = await stack.enter_async_context(open_pages(router)) if metrics else None
            task_status.started()
            while True:
                sock, _ = await listener.accept()
                nursery.start_soon(_answer, router, pages, sock)


async def _answer(router: OperatedRouter, pages: Pages | None,
                  sock: trio.socket.SocketType) -> None:
    _pid, uid, _gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    stream = trio.SocketStream(sock)
    async with stream:
        if uid != os.getuid():
            log.warning("refused an operations request from user %d", uid)
            return
        try:
            with trio.fail_after(REQUEST_TIMEOUT):
                request = await _read_line(stream)
            if request is None:
                return
            await stream.send_all(await answer(router, pages, request))
        except (*STREAM_GONE, trio.TooSlowError, UnicodeDecodeError) as e:
            log.debug("an operations request failed: %r", e)
        except Exception:  # a failing request ends its connection, never the worker
            log.exception("an operations request failed")


async def answer(router: OperatedRouter, pages: Pages | None, request: str) -> bytes:
    kind, _, rest = request.partition(" ")
    if kind == "control":
        session = ControlSession(router)
        session.role = Role.ADMIN
        lines = await session.execute(rest)
        return "".join(f"{line}\n" for line in lines).encode()
    if kind == "page" and pages is not None:
        method, _, target = rest.partition(" ")
        status, body, content_type = await pages.page(method, target, lambda: True)
        return f"{status}\n{content_type}\n".encode() + body
    if kind == "stats":
        return stats_answer(router)
    return f"error: unknown request {kind!r}\n".encode()


def stats_answer(router: OperatedRouter) -> bytes:
    """The worker's figures for the stats log; its sketch of active queues starts over
    (the supervisor merged what it had into its own: docs/workers.md#one-router-to-the-operator)."""
    sketch = getattr(router, "active_queues", None)
    active = None
    if sketch is not None:
        active = sketch.to_text()
        sketch.clear()
    return (json.dumps({"pid": os.getpid(), "statistics": asdict(router.statistics()),
                        "active": active}) + "\n").encode()


async def _read_line(stream: trio.SocketStream) -> str | None:
    buffer = bytearray()
    while b"\n" not in buffer:
        if len(buffer) > MAX_REQUEST:
            raise UnicodeDecodeError("utf-8", b"", 0, 0, "a request line too long")
        data = await stream.receive_some(4096)
        if not data:
            return None
        buffer += data
    return buffer[: buffer.index(b"\n")].decode("utf-8")
