"""The router's own listener: TCP (or TLS), the HTTP upgrade, WebSocket framing.

Theory of operation: one accept loop takes sockets off the listening socket and
starts one task per connection. Each time the socket is readable it takes every
connection waiting in the backlog (up to `ACCEPT_BATCH`), not one: a pass of
Trio's scheduler over thousands of busy connections can take a second, and at
one accept per pass a router busy with a reconnecting crowd would let the
rest of the crowd wait in the kernel, retrying. That task reads the HTTP request head under a
fixed deadline (a trickle of bytes cannot extend it, EOF ends it at once),
asks the request hook what to do, and either answers plain HTTP and closes, or
completes the WebSocket upgrade and runs the connection handler with a
`WebSocketTransport` (blocks in and out, docs/protocol.md "Transport").

The framing is `websockets`' sans-I/O protocol, driven from the connection's
own tasks: no reader task of a library, nothing buffered between reads. The
limits are ours and are set in `EdgeLimits`:

- connections still in the upgrade or the SMP handshake ("pending") are capped
  per remote address and in total; the handler calls
  `WebSocketTransport.established()` once its handshake is through;
- all connections are capped, below the process's file-descriptor limit with
  headroom; above the cap a client gets `503` before the upgrade;
- a message (one block) may take at most `max_message_frames` frames and
  `message_timeout` seconds from its first frame to its last;
- an accept failing for lack of descriptors (EMFILE) is logged at most once per
  `FD_LOG_INTERVAL` and retried after a pause, never a traceback per retry.
"""

from __future__ import annotations

import errno
import logging
import math
import resource
import socket
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import trio
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from router.protocol.block import BLOCK_SIZE

from .transport import RECEIVE_BUFFER_SIZE, TransportClosed

log = logging.getLogger(__name__)

# websockets logs every opened and closed connection at INFO: too much for a
# router with thousands of clients. Its warnings and errors still get through.
_framing_log = logging.getLogger(__name__ + ".framing")
_framing_log.setLevel(logging.WARNING)

# A read is parsed in pieces of about one block's frame: tiny frames cost at most
# a piece's parsing before MAX_FRAMES_PER_READ ends the connection; a read holding
# whole blocks has at most a few frames (RECEIVE_BUFFER_SIZE is four blocks).
FEED_SIZE = BLOCK_SIZE + 16
MAX_FRAMES_PER_READ = 64
FD_LOG_INTERVAL = 10.0  # seconds between two log lines about descriptor exhaustion
ACCEPT_RETRY_DELAY = 0.1  # seconds to wait for a free descriptor after EMFILE
REFUSAL_TIMEOUT = 1.0  # seconds a refused client gets to send its request for the 503
MAX_REFUSING = 64  # refusals answered at once; beyond that a refused socket just closes
_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# A connection that went away while in the backlog: skip it, accept the next.
_GONE_ERRORS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
ACCEPT_BATCH = 256  # connections taken off the backlog per wake-up at most


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


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The edge's deadlines and caps (README "Limits of the listener")."""

    upgrade_timeout: float = 10.0  # seconds from accept to a complete request head
    max_request_bytes: int = 8192  # request line and headers
    max_pending: int = 1024  # connections in the upgrade or SMP handshake, in total
    max_pending_per_address: int = 128  # the same, from one remote address
    max_connections: int = 50_000  # every open connection; lowered to fit the fd limit
    fd_headroom: int = 64  # descriptors kept free for stores, logs and refusals
    max_message_frames: int = 16  # frames of one message (a block)
    message_timeout: float = 10.0  # seconds from a message's first frame to its last
    keepalive_interval: float = 60.0  # a silent peer is pinged after this long
    keepalive_timeout: float = 30.0  # and dropped if still silent this long after the ping
    stalled_timeout: float = 30.0  # a peer that takes longer to accept one block is dropped
    close_timeout: float = 2.0  # the WebSocket closing handshake


def connection_cap(limits: EdgeLimits) -> int:
    """`max_connections`, lowered to leave `fd_headroom` below RLIMIT_NOFILE."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, soft - limits.fd_headroom))


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context from a PEM certificate chain and its private key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


# --- the block transport of one upgraded connection ---------------------------------


class WebSocketTransport:
    """Blocks in and out of one upgraded connection (the router's block transport).

    `receive_block` runs in the connection's receive task and does the reading,
    the keepalive pings and the per-message bounds itself; `send_block` runs in
    its send task. Writes are serialized by a lock, since the receive task also
    writes (pongs, pings, the close frame).
    """

    __slots__ = (
        "_stream", "_protocol", "_limits", "_events", "_send_lock", "_on_established",
        "_control_frames", "remote", "stalled",
    )

    def __init__(
        self,
        stream: trio.abc.Stream,
        protocol: ServerProtocol,
        remote: str,
        limits: EdgeLimits,
        on_established: Callable[[], None] | None = None,
    ) -> None:
        self._stream = stream
        self._protocol = protocol
        self._limits = limits
        self._events: list[object] = []  # frames read but not yet taken
        self._send_lock = trio.Lock()
        self._on_established = on_established
        self._control_frames = 0  # pings, pongs since the last block
        self.remote = remote
        self.stalled = False

    @asynccontextmanager
    async def _sending(self) -> AsyncIterator[None]:
        """The write lock, taken without a pass through the scheduler when it is free
        (the usual case: trio.Lock's `acquire` always yields, once per block sent)."""
        lock = self._send_lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def established(self) -> None:
        """The SMP handshake is done: the connection no longer counts as pending."""
        if self._on_established is not None:
            self._on_established()
            self._on_established = None

    async def receive_block(self) -> bytes:
        parts: list[bytes] = []
        frames = 0
        message_deadline = math.inf
        while True:
            while self._events:
                frame = self._events.pop(0)
                if not isinstance(frame, Frame):
                    continue
                opcode = frame.opcode
                if opcode is Opcode.BINARY or opcode is Opcode.CONT:
                    frames += 1
                    if frames == 1:
                        message_deadline = trio.current_time() + self._limits.message_timeout
                    parts.append(frame.data)
                    frame.data = b""  # the parser's last frame must not keep the block alive
                    if frame.fin:
                        self._control_frames = 0
                        if not self._events:
                            self._events = []  # drop the list's spare capacity too
                        return _one_block(parts)
                    if frames >= self._limits.max_message_frames:
                        await self._fail(1009, "too many frames in one message")
                elif opcode is Opcode.TEXT:
                    await self._fail(1003, "text message instead of a block")
                elif opcode is Opcode.CLOSE:
                    await self._flush()
                    raise TransportClosed("peer closed the connection")
                else:  # a ping (the protocol queued its pong) or a pong
                    self._control_frames += 1
                    if self._control_frames > self._limits.max_message_frames:
                        await self._fail(1008, "too many control frames between two blocks")
                    if opcode is Opcode.PING:
                        await self._flush()
            await self._read(message_deadline)

    async def _read(self, message_deadline: float) -> None:
        """Read once and parse; pings a silent peer, drops it if the ping goes unanswered."""
        limits = self._limits
        ping_sent = False
        while True:
            wait = limits.keepalive_timeout if ping_sent else limits.keepalive_interval
            keepalive_deadline = trio.current_time() + wait
            with trio.move_on_at(min(keepalive_deadline, message_deadline)):
                try:
                    data = await self._stream.receive_some(RECEIVE_BUFFER_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
                    raise TransportClosed("peer closed the connection") from e
                break
            if trio.current_time() >= message_deadline:
                await self._fail(1008, f"message not complete in {limits.message_timeout} s")
            if ping_sent:
                raise TransportClosed(f"no answer to a ping in {limits.keepalive_timeout} s")
            await self._ping()
            ping_sent = True
        protocol = self._protocol
        if not data:
            protocol.receive_eof()
            raise TransportClosed("peer closed the connection")
        await self._parse(data)

    async def _parse(self, data: bytes) -> None:
        """Feed what was read to the protocol a block's worth at a time, so that a read
        full of tiny frames costs at most that much parsing before the cap ends it."""
        protocol = self._protocol
        view = memoryview(data)
        events = self._events
        for start in range(0, len(view), FEED_SIZE):
            protocol.receive_data(view[start:start + FEED_SIZE])  # type: ignore[arg-type]
            events.extend(protocol.events_received())
            if protocol.parser_exc is not None:
                await self._flush()
                raise TransportClosed(f"bad framing: {protocol.parser_exc}")
            if len(events) > MAX_FRAMES_PER_READ:
                await self._fail(1008, "too many frames at once")

    async def _ping(self) -> None:
        async with self._sending():
            self._protocol.send_ping(b"")
            await self._write_pending()

    async def _fail(self, code: int, reason: str) -> None:
        async with self._sending():
            if self._protocol.state is OPEN:
                self._protocol.fail(code, reason)
            await self._write_pending()
        raise TransportClosed(reason)

    async def _flush(self) -> None:
        async with self._sending():
            await self._write_pending()

    async def _write_pending(self) -> None:
        writes = self._protocol.data_to_send()
        data = b"".join(writes) if len(writes) != 1 else writes[0]
        del writes
        if not data:  # nothing, or only the end-of-stream mark: the stream is closed later
            return
        with trio.move_on_after(self._limits.stalled_timeout) as scope:
            await self._send_all(data)
        if scope.cancelled_caught:
            self.stalled = True
            raise TransportClosed(f"peer did not read for {self._limits.stalled_timeout} s")

    async def _send_all(self, data: bytes) -> None:
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise TransportClosed("peer closed the connection") from e

    async def send_block(self, block: bytes) -> None:
        """Send one block; a peer that does not take it within the deadline is dropped."""
        await self.send_blocks([block])

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """Send blocks in one write; a peer that does not take them in time is dropped."""
        async with self._sending():
            protocol = self._protocol
            if protocol.state is not OPEN:
                raise TransportClosed("connection closing")
            for block in blocks:
                protocol.send_binary(block)
            await self._write_pending()

    async def aclose(self, timeout: float) -> None:
        """Send a close frame within `timeout` (none if zero), then close the TCP stream."""
        if timeout > 0 and self._protocol.state is OPEN:
            with trio.move_on_after(timeout):
                try:
                    async with self._sending():
                        self._protocol.send_close(1000)
                        await self._write_pending()
                except TransportClosed:
                    pass
        self._events = []
        await trio.aclose_forcefully(self._stream)


@contextmanager
def _framing() -> Iterator[ServerProtocol]:
    """One connection's framing, its parser closed once the connection is done.

    The protocol's parser is a generator suspended in its own frame, and the
    error that stopped it (`parser_exc`: EOF, for a client that just went away)
    keeps that frame in its traceback; both frames hold the protocol. Those are
    reference cycles that reference counting never frees, left for a full
    collection (a dozen objects per connection, 200,000 after a reconnection
    storm of 20,000 clients). Closing the generator and dropping the error end
    them.
    """
    protocol = ServerProtocol(max_size=BLOCK_SIZE, logger=_framing_log)
    try:
        yield protocol
    finally:
        protocol.parser.close()
        protocol.parser_exc = None


def _one_block(parts: list[bytes]) -> bytes:
    block = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(block) != BLOCK_SIZE:
        raise TransportClosed(f"message of {len(block)} bytes instead of a block")
    return block


# --- the listener ------------------------------------------------------------------------


ConnectionHandler = Callable[[WebSocketTransport], Awaitable[None]]


class EdgeListener:
    """The listening socket, its accept loop, and the counts its caps are checked on."""

    def __init__(
        self,
        listener: socket.socket,
        handler: ConnectionHandler,
        hook: RequestHook,
        limits: EdgeLimits,
        tls: ssl.SSLContext | None,
    ) -> None:
        self._listener = listener
        self._handler = handler
        self._hook = hook
        self.limits = limits
        self._tls = tls
        self.max_connections = connection_cap(limits)
        self.open_connections = 0
        self.pending = 0
        self._pending_by_address: Counter[str] = Counter()
        self._refusing = 0
        self.refused = 0  # connections answered 503 or closed at once, since start
        self._suspended = False
        self._resumed = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._last_fd_log = -math.inf
        self.fd_exhaustions = 0  # accepts that failed for lack of descriptors
        self._closed_one = trio.Event()  # set (and renewed) whenever a connection ends

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    @property
    def host(self) -> str:
        return self._listener.getsockname()[0]

    @property
    def suspended(self) -> bool:
        return self._suspended

    async def wait_connections_at_most(self, count: int) -> None:
        """Return once no more than `count` connections are open."""
        while self.open_connections > count:
            await self._closed_one.wait()

    def suspend(self) -> None:
        """Stop accepting; open connections go on, new ones wait in the kernel's backlog."""
        if not self._suspended:
            self._suspended = True
            self._resumed = trio.Event()
            if self._accept_scope is not None:
                self._accept_scope.cancel()

    def resume(self) -> None:
        """Accept again after `suspend()`."""
        if self._suspended:
            self._suspended = False
            self._resumed.set()

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                if self._suspended:
                    await self._resumed.wait()
                    continue
                for stream in await self._accept_waiting():
                    nursery.start_soon(self._serve_socket, stream)

    async def _accept_waiting(self) -> list[trio.SocketStream]:
        """The connections waiting in the backlog, once there is one (none if
        suspended meanwhile or out of descriptors)."""
        with trio.CancelScope() as self._accept_scope:
            await trio.lowlevel.wait_readable(self._listener)
        self._accept_scope = None
        streams: list[trio.SocketStream] = []
        while not self._suspended and len(streams) < ACCEPT_BATCH:
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in _GONE_ERRORS:
                    continue
                if e.errno not in _FD_ERRORS:
                    raise
                self._log_fd_exhaustion(e)
                if not streams:
                    await trio.sleep(ACCEPT_RETRY_DELAY)
                break
            streams.append(trio.SocketStream(trio.socket.from_stdlib_socket(sock)))
        return streams

    def _log_fd_exhaustion(self, e: OSError) -> None:
        self.fd_exhaustions += 1
        now = trio.current_time()
        if now - self._last_fd_log >= FD_LOG_INTERVAL:
            self._last_fd_log = now
            log.warning(
                "cannot accept connections: %s (%d open, %d such failures so far); "
                "retrying every %.1f s", e.strerror or e, self.open_connections,
                self.fd_exhaustions, ACCEPT_RETRY_DELAY,
            )

    async def _serve_socket(self, stream: trio.SocketStream) -> None:
        remote_host, remote = _peer(stream)
        if self.open_connections >= self.max_connections:
            await self._refuse(stream, "the router is at its connection limit")
            return
        if (self.pending >= self.limits.max_pending
                or self._pending_by_address[remote_host] >= self.limits.max_pending_per_address):
            await self._refuse(stream, "too many connections being opened")
            return
        self.open_connections += 1
        self.pending += 1
        self._pending_by_address[remote_host] += 1
        released = False

        def release_pending() -> None:
            nonlocal released
            if not released:
                released = True
                self.pending -= 1
                self._pending_by_address[remote_host] -= 1
                if not self._pending_by_address[remote_host]:
                    del self._pending_by_address[remote_host]

        try:
            with _framing() as protocol:
                transport = await self._upgrade(stream, protocol, remote, release_pending)
                if transport is not None:
                    await self._handler(transport)
        finally:
            release_pending()
            await trio.aclose_forcefully(stream)
            self.open_connections -= 1
            self._closed_one.set()
            self._closed_one = trio.Event()

    async def _refuse(self, stream: trio.SocketStream, why: str) -> None:
        """503 for a client the caps keep out; a flood of them is just closed."""
        self.refused += 1
        if self._refusing >= MAX_REFUSING or self._tls is not None:
            await trio.aclose_forcefully(stream)
            return
        self._refusing += 1
        try:
            with trio.move_on_after(REFUSAL_TIMEOUT):
                with _framing() as protocol:
                    await _read_request_head(stream, protocol, self.limits.max_request_bytes)
                await stream.send_all(_http_response(HttpResponse(503, why.encode() + b"\n")))
        except (trio.BrokenResourceError, trio.ClosedResourceError, _BadRequest):
            pass
        finally:
            self._refusing -= 1
            await trio.aclose_forcefully(stream)

    async def _upgrade(
        self, raw: trio.SocketStream, protocol: ServerProtocol, remote: str,
        on_established: Callable[[], None],
    ) -> WebSocketTransport | None:
        """Read the request and answer it; the transport if it became a WebSocket."""
        stream: trio.abc.Stream = raw
        if self._tls is not None:
            stream = trio.SSLStream(raw, self._tls, server_side=True)
        with trio.move_on_after(self.limits.upgrade_timeout):
            try:
                request, events = await _read_request_head(
                    stream, protocol, self.limits.max_request_bytes
                )
                return await self._answer(stream, protocol, request, events, remote,
                                          on_established)
            except _BadRequest as e:
                log.debug("bad request from %s: %s", remote, e)
                if e.response:
                    await _send_quietly(stream, e.response)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
                pass
        return None

    async def _answer(
        self,
        stream: trio.abc.Stream,
        protocol: ServerProtocol,
        request: Request,
        events: list[object],
        remote: str,
        on_established: Callable[[], None],
    ) -> WebSocketTransport | None:
        http_request = _http_request(request, remote)
        answer = await self._hook(http_request)
        if isinstance(answer, HttpResponse):
            await _send_quietly(stream, _http_response(answer))
            return None
        if answer is not ACCEPT_WEBSOCKET:
            raise TypeError(f"request hook returned {answer!r}")
        response = protocol.accept(request)
        _drop_header(response, "Server")
        protocol.send_response(response)
        for data in protocol.data_to_send():
            if data:
                await stream.send_all(data)
        # The protocol's parser keeps the request for the connection's life: not its headers.
        request.headers.clear()
        if response.status_code != 101:
            return None
        transport = WebSocketTransport(stream, protocol, remote, self.limits, on_established)
        transport._events.extend(events)
        return transport


class _BadRequest(Exception):
    def __init__(self, reason: str, response: bytes = b"") -> None:
        super().__init__(reason)
        self.response = response


async def _read_request_head(
    stream: trio.abc.Stream, protocol: ServerProtocol, max_bytes: int
) -> tuple[Request, list[object]]:
    """Feed the protocol until it has the request; the frames that came with it too."""
    received = 0
    while True:
        data = await stream.receive_some(RECEIVE_BUFFER_SIZE)
        if not data:
            raise _BadRequest("closed before the request was complete")
        received += len(data)
        protocol.receive_data(data)
        events = protocol.events_received()
        if events and isinstance(events[0], Request):
            return events[0], events[1:]
        if protocol.handshake_exc is not None:
            raise _BadRequest(str(protocol.handshake_exc), b"".join(protocol.data_to_send()))
        if received > max_bytes:
            raise _BadRequest(
                "request head too large",
                _http_response(HttpResponse(431, b"Request header fields too large\n")),
            )


def _http_request(request: Request, remote: str) -> HttpRequest:
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


def _http_response(response: HttpResponse) -> bytes:
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


def _drop_header(response: Response, name: str) -> None:
    if name in response.headers:
        del response.headers[name]


async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
        pass


def _peer(stream: trio.SocketStream) -> tuple[str, str]:
    """The remote host (what the per-address cap counts) and "host:port"."""
    try:
        address = stream.socket.getpeername()
    except OSError:
        return "?", "?"
    host, port = address[0], address[1]
    return host, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_edge(
    handler: ConnectionHandler,
    host: str,
    port: int,
    *,
    hook: RequestHook = accept_every_upgrade,
    limits: EdgeLimits = EdgeLimits(),
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[EdgeListener] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `host:port` (0: a free port) until cancelled; reports the `EdgeListener`
    (its `port`, `suspend()`, `resume()`) through `task_status`."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    for extra in listeners[1:]:
        await extra.aclose()
    # The accept loop takes connections without a checkpoint between them, which
    # Trio's own accept always makes: it gets the plain socket.
    listener = socket.socket(fileno=listeners[0].socket.detach())
    listener.setblocking(False)
    edge = EdgeListener(listener, handler, hook, limits, tls)
    with listener:
        task_status.started(edge)
        await edge.serve()

