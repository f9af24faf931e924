"""Control commands on a localhost port, in the reference SMP server's line protocol.

One command per line, answers as lines; `nc 127.0.0.1 PORT` or `telnet` is
the client. A session starts without a role: `auth PASSWORD` with the admin
password (`control_port_admin_password`) gives every command, with the user
password (`control_port_user_password`) the read-only ones. A command the
role does not allow is answered `AUTH`, as the reference does.

    auth PASSWORD          Current role is admin | user | none
    stats                  the router's statistics, `name: value` lines      (user)
    clients                one line per connected client                     (user)
    status QUEUE_ID        a queue's state and message count                 (user)
    delete QUEUE_ID        delete the queue and its messages (subscriber: DELD)
    block QUEUE_ID [spam|content] [notice [SECONDS]]
                                    every command on it gets ERR BLOCKED; with `notice`,
                                    v18 clients also get a client notice (shown for
                                    SECONDS, or until further notice)
    unblock QUEUE_ID
    save                   write the memory store's snapshot now
    suspend / resume       stop / restart accepting clients, reading commands
                           and delivering messages
    memory [fresh]         live memory by component (queue table, messages,
                           subscriptions, connections, buffers) and by type,
                           and the allocators' figures (ops/memory.py)
    drain [SECONDS]        stop accepting clients, close the connected ones over
                           SECONDS (drain_period, 30), then stop the router
    help, quit

QUEUE_ID is the recipient id in base64url, as in the smp:// queue links
(padding optional). The listener binds 127.0.0.1 only: the passwords cross
the connection in clear.

Against guessing and hoarding: a wrong password costs its address a growing
delay and, after `control_lockout_after` of them, a lockout
(login_throttle.py); refused logins and commands are logged at most once per
ten seconds each; at most `control_max_sessions` sessions are open at once
(the next one is told so and closed), and a session without a role is closed
after `UNAUTHENTICATED_TIMEOUT` of silence.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import math
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import fields
from enum import Enum
from typing import TYPE_CHECKING

import trio

from store.interfaces import Party

from ..edge.block_stream import STREAM_GONE
from ..edge.listen import bound_port, open_listeners
from ..settings.config import ConfigError, StartupError, os_error_reason
from .login_throttle import LoginThrottle, RateLimitedLog

if TYPE_CHECKING:
    from .operated import OperatedRouter

log = logging.getLogger(__name__)

CONTROL_HOST = "127.0.0.1"
MAX_LINE = 4096  # bytes; a longer line ends the session
IDLE_TIMEOUT = 600.0  # seconds a session may stay silent
UNAUTHENTICATED_TIMEOUT = 30.0  # the same before a password was accepted
LOCKOUT_SECONDS = 900.0  # how long an address that guessed too often is locked out
CLIENT_TIMEOUT = 30.0  # seconds `smp-router control` waits for the router
BLOCK_REASONS = ("spam", "content")
MEMORY_MAX_AGE = 10.0  # seconds a census stays good enough for `memory`
MAX_DRAIN_PERIOD = 3600.0  # seconds `drain` may take at most


class Role(Enum):
    NONE = "none"
    USER = "user"
    ADMIN = "admin"


class LineTooLong(Exception):
    pass


Handler = Callable[["ControlSession", list[str]], Awaitable[list[str]]]


class ControlGuard:
    """What every session of one control port shares: the wrong passwords of each
    address, the sessions open, and the log of refusals (module doc)."""

    def __init__(self, *, login_delay: float, lockout_after: int, max_sessions: int) -> None:
        self.throttle = LoginThrottle(delay=login_delay, lockout_after=lockout_after,
                                      lockout=LOCKOUT_SECONDS)
        self.max_sessions = max_sessions
        self.sessions = 0
        self.refused_logins = RateLimitedLog(log)
        self.refused_commands = RateLimitedLog(log)


class ControlSession:
    """One control connection: its role, where it comes from, and the router it acts on."""

    def __init__(self, router: OperatedRouter, address: str = CONTROL_HOST,
                 guard: ControlGuard | None = None,
                 commands: Mapping[str, tuple[Role, Handler]] | None = None) -> None:
        self.router = router
        # Another table for the port of several workers (workers/operator.py).
        self.commands = COMMANDS if commands is None else commands
        self.address = address
        config = router.config
        self.guard = guard or ControlGuard(
            login_delay=config.control_login_delay,
            lockout_after=config.control_lockout_after,
            max_sessions=config.control_max_sessions,
        )
        self.role = Role.NONE
        self.done = False

    async def execute(self, line: str) -> list[str]:
        words = line.split()
        if not words:
            return []
        name, args = words[0].lower(), words[1:]
        command = self.commands.get(name)
        if command is None:
            return [f"error: unknown command {name!r}; try help"]
        needed, handler = command
        if not self._allows(needed):
            self.guard.refused_commands.warning(
                "control port: %s from %s refused without the %s role", name, self.address,
                needed.value)
            return ["AUTH"]
        return await handler(self, args)

    def _allows(self, needed: Role) -> bool:
        if needed is Role.NONE:
            return True
        if needed is Role.USER:
            return self.role in (Role.USER, Role.ADMIN)
        return self.role is Role.ADMIN


# --- commands ------------------------------------------------------------------------


async def _auth(session: ControlSession, args: list[str]) -> list[str]:
    config = session.router.config
    given = args[0].encode() if len(args) == 1 else b""
    session.role = Role.NONE
    throttle, address = session.guard.throttle, session.address
    async with throttle.turn(address):  # one attempt of an address at a time
        locked = throttle.locked_for(address)
        if locked:
            session.guard.refused_logins.warning(
                "control port: login refused from %s: locked out for %.0f s more", address,
                locked)
            return [f"error: locked out after {throttle.lockout_after} wrong passwords; "
                    f"try again in {math.ceil(locked)} s"]
        if _same(config.control_admin_password, given):
            session.role = Role.ADMIN
        elif _same(config.control_user_password, given):
            session.role = Role.USER
        if session.role is Role.NONE:
            session.guard.refused_logins.warning(
                "control port: login refused from %s (a wrong password)", address)
            await throttle.failed(address)
        else:
            throttle.succeeded(address)
    return [f"Current role is {session.role.value}"]


def _same(password: str | None, given: bytes) -> bool:
    return bool(password) and hmac.compare_digest(password.encode(), given)  # type: ignore[union-attr]


async def _stats(session: ControlSession, args: list[str]) -> list[str]:
    router = session.router
    stats = router.statistics()
    lines = [f"{f.name}: {getattr(stats, f.name)}" for f in fields(stats)]
    lines.append(f"queues_stored: {await router.queues.queue_count()}")
    lines.append(f"suspended: {'yes' if router.gate.suspended else 'no'}")
    return lines


async def _clients(session: ControlSession, args: list[str]) -> list[str]:
    lines = ["id remote version subscriptions deliveries_waiting"]
    subscriptions = session.router.subscriptions
    for conn in list(session.router.connections.values()):
        if getattr(conn.transport, "shadow", False):
            continue  # another worker's client, listed by that worker
        s = subscriptions.subscriber_for(conn)
        queues, waiting = (0, 0) if s is None else (len(s.queues), len(s.deliveries))
        lines.append(f"{conn.id} {conn.transport.remote} v{conn.version} {queues} {waiting}")
    lines.append(f"{len(lines) - 1} clients")
    return lines


async def _status(session: ControlSession, args: list[str]) -> list[str]:
    rid = queue_id_of(args)
    if rid is None:
        return ["error: usage: status QUEUE_ID"]
    router = session.router
    queue = await router.queues.get_queue(Party.RECIPIENT, rid)
    if queue is None:
        return ["error: no such queue"]
    blocked = router.blocked.get(rid)
    state = f"blocked ({blocked})" if blocked else queue.status.value
    size = await router.messages.queue_size(rid)
    return [f"status: {state}, secured: {'yes' if queue.sender_key else 'no'}, "
            f"messages: {size}"]


async def _delete(session: ControlSession, args: list[str]) -> list[str]:
    rid = queue_id_of(args)
    if rid is None:
        return ["error: usage: delete QUEUE_ID"]
    if not await session.router.delete_queue(rid):
        return ["error: no such queue"]
    log.info("control port: queue %s deleted", args[0])
    return ["ok"]


_BLOCK_USAGE = "error: usage: block QUEUE_ID [spam|content] [notice [SECONDS]]"


async def _block(session: ControlSession, args: list[str]) -> list[str]:
    rid = queue_id_of(args[:1])
    reason = args[1].lower() if len(args) >= 2 else "spam"
    if rid is None or len(args) > 4 or reason not in BLOCK_REASONS:
        return [_BLOCK_USAGE]
    if len(args) >= 3:
        # The client notice (docs/protocol.md#errors): v18 clients show it to the user.
        if args[2] != "notice" or (len(args) == 4 and not args[3].isdigit()):
            return [_BLOCK_USAGE]
        ttl = f'"ttl":{int(args[3])}' if len(args) == 4 else ""
        reason += ",notice={" + ttl + "}"
    if not await session.router.block_queue(rid, reason):
        return ["error: no such queue"]
    log.info("control port: queue %s blocked (%s)", args[0], reason)
    return ["ok"]


async def _unblock(session: ControlSession, args: list[str]) -> list[str]:
    rid = queue_id_of(args)
    if rid is None:
        return ["error: usage: unblock QUEUE_ID"]
    if not session.router.unblock_queue(rid):
        return ["error: queue is not blocked"]
    log.info("control port: queue %s unblocked", args[0])
    return ["ok"]


async def _save(session: ControlSession, args: list[str]) -> list[str]:
    return [session.router.save_now()]


async def _suspend(session: ControlSession, args: list[str]) -> list[str]:
    session.router.suspend()
    log.warning("control port: router suspended")
    return ["ok: suspended (no new clients, no commands read, no deliveries)"]


async def _resume(session: ControlSession, args: list[str]) -> list[str]:
    session.router.resume()
    log.warning("control port: router resumed")
    return ["ok: resumed"]


async def _memory(session: ControlSession, args: list[str]) -> list[str]:
    """The router's memory by component and by type (ops/memory.py): the latest census
    if it is at most MEMORY_MAX_AGE seconds old, else a new one; `memory fresh` takes
    a new one. Either way one census at a time, bounded in objects walked."""
    if args not in ([], ["fresh"]):
        return ["error: usage: memory [fresh]"]
    census = await session.router.memory.fresh(0.0 if args else MEMORY_MAX_AGE)
    return census.lines()


async def _drain(session: ControlSession, args: list[str]) -> list[str]:
    try:
        period = float(args[0]) if args else session.router.config.drain_period
    except ValueError:
        period = -1.0
    if len(args) > 1 or not 0 <= period <= MAX_DRAIN_PERIOD:
        return [f"error: usage: drain [SECONDS] (0 to {MAX_DRAIN_PERIOD:.0f}, default "
                f"{session.router.config.drain_period:g}: drain_period)"]
    if not session.router.start_drain(period):
        return ["error: the router is draining already"]
    log.info("control port: drain over %.0f s", period)
    return [f"ok: draining: no new clients, the connected ones closed over {period:g} s, "
            "then the router stops"]


async def _help(session: ControlSession, args: list[str]) -> list[str]:
    return [f"{name} ({role.value} role)" if role is not Role.NONE else name
            for name, (role, _) in session.commands.items()]


async def _quit(session: ControlSession, args: list[str]) -> list[str]:
    session.done = True
    return []


COMMANDS: dict[str, tuple[Role, Handler]] = {
    "auth": (Role.NONE, _auth),
    "help": (Role.NONE, _help),
    "quit": (Role.NONE, _quit),
    "stats": (Role.USER, _stats),
    "clients": (Role.USER, _clients),
    "status": (Role.USER, _status),
    "delete": (Role.ADMIN, _delete),
    "block": (Role.ADMIN, _block),
    "unblock": (Role.ADMIN, _unblock),
    "save": (Role.ADMIN, _save),
    "suspend": (Role.ADMIN, _suspend),
    "resume": (Role.ADMIN, _resume),
    "memory": (Role.ADMIN, _memory),
    "drain": (Role.ADMIN, _drain),
}


def queue_id_of(args: list[str]) -> bytes | None:
    if len(args) != 1:
        return None
    text = args[0]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


# --- the listener --------------------------------------------------------------------


async def serve_control(
    router: OperatedRouter, port: int,
    *, commands: Mapping[str, tuple[Role, Handler]] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve control sessions on 127.0.0.1:port until cancelled; reports the bound port.
    `commands` replaces the table of commands (the supervisor's of several workers)."""
    listeners = await open_listeners("the control port", CONTROL_HOST, port)
    config = router.config
    guard = ControlGuard(login_delay=config.control_login_delay,
                         lockout_after=config.control_lockout_after,
                         max_sessions=config.control_max_sessions)

    async def handle(stream: trio.SocketStream) -> None:
        if guard.sessions >= guard.max_sessions:
            guard.refused_commands.warning(
                "control port: a session refused: %d are open", guard.sessions)
            with trio.move_on_after(1.0):
                await _send_quietly(stream, f"error: too many control sessions "
                                    f"({guard.max_sessions}); try again later\n".encode())
            await trio.aclose_forcefully(stream)
            return
        guard.sessions += 1
        try:
            guard.throttle.forget_idle()
            await run_session(ControlSession(router, _peer_host(stream), guard, commands),
                              stream)
        except (*STREAM_GONE, trio.TooSlowError,
                LineTooLong, UnicodeDecodeError) as e:
            log.debug("control session ended: %r", e)
        except Exception:  # a failing command ends its session, never the router
            log.exception("control session failed")
        finally:
            guard.sessions -= 1
            await trio.aclose_forcefully(stream)

    task_status.started(bound_port(listeners))
    await trio.serve_listeners(handle, listeners)


async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except STREAM_GONE:
        pass


def _peer_host(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return "?"


async def run_session(session: ControlSession, stream: trio.abc.Stream) -> None:
    buffer = bytearray()
    while not session.done:
        with trio.fail_after(IDLE_TIMEOUT if session.role is not Role.NONE
                             else UNAUTHENTICATED_TIMEOUT):
            line = await _read_line(stream, buffer)
        if line is None:
            return
        answer = await session.execute(line.decode("utf-8").strip())
        if answer:
            await stream.send_all(("\n".join(answer) + "\n").encode())


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes | None:
    while True:
        end = buffer.find(b"\n")
        if end >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            return line
        if len(buffer) > MAX_LINE:
            raise LineTooLong
        data = await stream.receive_some(4096)
        if not data:
            return None
        buffer += data


# --- the command-line client (`smp-router control`) ------------------------------------

EXIT_REFUSED = 1  # the router answered a command with AUTH or an error


class CommandRefused(Exception):
    """The router refused or failed a command; the message is the one stderr line."""


def refusal(answer: list[str]) -> str | None:
    """The router's refusal in a command's answer, or None: `AUTH` (the role may not use
    the command) and `error: ...` lines (unknown command, no such queue, usage) are the
    only answers that say no."""
    for line in answer:
        if line == "AUTH" or line.startswith("error:"):
            return line
    return None


def run_control_commands(settings: Mapping[str, object], role: str, lines: list[str]) -> int:
    """Authenticate with the configuration's password for `role`, send each line, print
    the answers. Each line is its own session (`auth`, the command, `quit`, answers read
    until the router closes it): the answers have no end mark, and one session per
    command tells exactly which command an answer belongs to. The first refused command
    ends the run with one stderr line and EXIT_REFUSED; the lines after it are not sent."""
    port = settings.get("control_port")
    password = settings.get(f"control_{role}_password")
    if port is None:
        raise ConfigError("no control port: set control_port in the configuration, or --port")
    if not password:
        raise ConfigError(f"no control_port_{role}_password in the configuration")
    for line in lines:
        answer = _command(int(port), role, str(password), line)  # type: ignore[call-overload]
        sys.stdout.write("".join(f"{text}\n" for text in answer))
        sys.stdout.flush()
        refused = refusal(answer)
        if refused is not None:
            sys.stderr.write(f"smp-router: error: the router refused `{line}`: {refused}\n")
            return EXIT_REFUSED
    return 0


def _command(port: int, role: str, password: str, line: str) -> list[str]:
    script = f"auth {password}\n{line}\nquit\n".encode()
    answer = _exchange(port, script).decode("utf-8", "replace")
    first, *rest = answer.splitlines() or [""]
    if first != f"Current role is {role}":
        raise StartupError(f"the control port at {CONTROL_HOST}:{port} refused the "
                           f"{role} password ({first or 'no answer'})")
    return rest


def _exchange(port: int, script: bytes) -> bytes:
    try:
        with socket.create_connection((CONTROL_HOST, port), timeout=CLIENT_TIMEOUT) as sock:
            sock.sendall(script)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as e:
        raise StartupError(
            f"cannot reach the control port at {CONTROL_HOST}:{port}: {os_error_reason(e)}"
        ) from e
    return b"".join(chunks)
