"""`smp-router`: the command line (a contract other tools rely on exactly).

    smp-router serve --host 127.0.0.1 --port 5224 --store memory
    smp-router init --data-dir DIR
    smp-router migrate-store --data-dir DIR --to sqlite

Without `--store`, `serve` keeps its queues and messages: it uses the kind
already in the data directory, or the sqlite store in a fresh one, and the
data directory defaults to `$XDG_DATA_HOME/smp-router` (or
`~/.local/share/smp-router`). `--store memory` without `--data-dir` keeps
nothing; with one, undelivered messages are saved on SIGINT/SIGTERM and
restored at the next start.

`serve` prints ONE line to stdout, flushed, once the router accepts
connections; it contains `ws://HOST:PORT` and the router's address
`smp://KEYHASH@HOST:PORT`. SIGINT and SIGTERM stop it cleanly (exit 0). A bad
flag or configuration gives one line on stderr and exit code 2, a failure to
start (e.g. the port is taken) one line and exit code 1; never a traceback.
Operator messages go to stderr through `logging`.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

import trio

from store import MigrationCheckError, migrate_store, read_store_kind

from .config import (
    DEFAULT_EXPIRE_INTERVAL,
    DEFAULT_MESSAGE_TTL,
    DEFAULT_STATS_INTERVAL,
    DELIVERY_MODES,
    FSYNC_POLICIES,
    STORE_KINDS,
    ConfigError,
    RouterConfig,
)
from .gc_policy import GcPolicy
from .identity import IdentityError, load_or_create_identity
from .router import Router, RouterInfo, serve_router
from .stores import StoreOpenError

log = logging.getLogger("smp-router")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
LOG_LEVELS = ("debug", "info", "warning", "error")
# The kind a fresh data directory gets without --store: with fsync batch it needs
# one sync per group of writes where the journal syncs every queue file written,
# and it opens without reading every queue (docs/stores.md, bench/RESULTS-stores.md).
DEFAULT_STORE = "sqlite"
STATS_LOG_NAME = "stats.csv"  # the stats log's name in the data directory


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/smp-router`, or `~/.local/share/smp-router` (XDG base directories)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "smp-router"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage text and then the error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="smp-router", description="SimpleX Messaging Protocol router")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve = commands.add_parser("serve", help="run the router")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve.add_argument("--port", type=int, default=5224, help="port; 0 picks a free one")
    serve.add_argument("--store", choices=STORE_KINDS,
                       help="where queues and messages are kept (default: the kind in the "
                       f"data directory, else {DEFAULT_STORE})")
    serve.add_argument("--data-dir", type=Path,
                       help="identity, stores and stats log (default: "
                       f"{default_data_dir()}); with --store memory and no data directory "
                       "nothing is kept and every start has a new identity")
    serve.add_argument("--fsync", choices=FSYNC_POLICIES, default="batch",
                       help="when stored data is forced to disk: never, batch (one fsync "
                       "per short window of writes), always")
    serve.add_argument("--skip-corrupt", action="store_true",
                       help="start even if a store log has a corrupt line (it is left out)")
    serve.add_argument("--message-ttl", type=float, default=DEFAULT_MESSAGE_TTL,
                       help="seconds an undelivered message is kept (default 21 days)")
    serve.add_argument("--expire-interval", type=float, default=DEFAULT_EXPIRE_INTERVAL,
                       help="seconds between passes that remove expired messages")
    serve.add_argument("--expire-on-send", action="store_true",
                       help="also remove a queue's expired messages on every SEND to it")
    serve.add_argument("--stats-log", type=Path,
                       help=f"CSV statistics log (default: {STATS_LOG_NAME} in the data "
                       "directory, if there is one)")
    serve.add_argument("--no-stats-log", action="store_true", help="write no statistics log")
    serve.add_argument("--stats-interval", type=int, default=DEFAULT_STATS_INTERVAL,
                       help="seconds per stats log line; must divide a day")
    serve.add_argument("--quota", type=_positive_int, default=128, help="messages per queue")
    serve.add_argument("--delivery", choices=DELIVERY_MODES, default="single-task")
    serve.add_argument("--password", help="basic-auth password required to create queues")
    serve.add_argument("--send-queue-size", type=_positive_int, default=64,
                       help="response batches buffered per connection")
    serve.add_argument("--stalled-writer-timeout", type=float, default=30.0,
                       help="seconds a client may take to read one block before it is dropped")
    serve.add_argument("--end-batch-interval", type=float, default=0.1,
                       help="seconds between flushes of END/DELD events")
    _add_listener_arguments(serve)
    serve.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    init = commands.add_parser("init", help="create the router identity in a data directory")
    init.add_argument("--data-dir", type=Path, required=True)
    init.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    migrate = commands.add_parser(
        "migrate-store", help="copy a data directory's queues and messages to another store kind"
    )
    migrate.add_argument("--data-dir", type=Path, required=True)
    migrate.add_argument("--to", choices=STORE_KINDS, required=True, dest="to_kind")
    migrate.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    return parser


# The listener's limits: flag, type, help (README "Limits of the listener"); each
# defaults to the RouterConfig field of the same name.
_LISTENER_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--upgrade-timeout", float, "seconds a new connection has to send its HTTP request"),
    ("--max-pending", int, "connections in the upgrade or SMP handshake, in total"),
    ("--max-pending-per-address", int, "the same, from one remote address"),
    ("--max-connections", int, "open connections (lowered to fit the descriptor limit)"),
    ("--max-message-frames", int, "WebSocket frames one block may be split into"),
    ("--message-timeout", float, "seconds from a block's first frame to its last"),
    ("--keepalive-interval", float, "seconds of silence before a client is pinged"),
    ("--keepalive-timeout", float, "seconds a pinged client has to answer"),
    ("--idle-timeout", float, "drop clients without subscriptions silent this long"),
    ("--tls-cert", Path, "PEM certificate chain: listen for wss:// (with --tls-key)"),
    ("--tls-key", Path, "the certificate's private key"),
)


def _add_listener_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, kind, text in _LISTENER_FLAGS:
        parser.add_argument(flag, type=kind, help=text)


def _listener_options(args: argparse.Namespace) -> dict[str, object]:
    """The listener flags given on the command line, as RouterConfig fields."""
    names = (flag[2:].replace("-", "_") for flag, _, _ in _LISTENER_FLAGS)
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def store_and_data_dir(store: str | None, data_dir: Path | None) -> tuple[str, Path | None]:
    """The store kind and data directory `serve` uses for its --store and --data-dir."""
    if store == "memory" and data_dir is None:
        return store, None
    data_dir = data_dir if data_dir is not None else default_data_dir()
    if store is None:
        store = read_store_kind(data_dir) or DEFAULT_STORE
    return store, data_dir


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    store, data_dir = store_and_data_dir(args.store, args.data_dir)
    stats_log = args.stats_log
    if stats_log is None and data_dir is not None:
        stats_log = data_dir / STATS_LOG_NAME
    return RouterConfig(
        host=args.host,
        port=args.port,
        store=store,
        data_dir=data_dir,
        fsync=args.fsync,
        message_ttl=args.message_ttl,
        expire_interval=args.expire_interval,
        expire_on_send=args.expire_on_send,
        stats_log=None if args.no_stats_log else stats_log,
        stats_interval=args.stats_interval,
        store_options={"skip_corrupt": True} if args.skip_corrupt else {},
        delivery=args.delivery,
        quota=args.quota,
        password=None if args.password is None else args.password.encode(),
        send_queue_size=args.send_queue_size,
        stalled_writer_timeout=args.stalled_writer_timeout,
        end_batch_interval=args.end_batch_interval,
        **_listener_options(args),  # type: ignore[arg-type]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "init":
            return _init(args.data_dir)
        if args.command == "migrate-store":
            return trio.run(_migrate, args.data_dir, args.to_kind)
        config = config_from_args(args)
        trio.run(_serve, config)
    except KeyboardInterrupt:
        return EXIT_OK  # a SIGINT before the signal handler was in place
    except BaseException as e:  # noqa: BLE001 - the one place that turns failures into exit codes
        return _report(e)
    return EXIT_OK


def _init(data_dir: Path) -> int:
    identity = load_or_create_identity(data_dir)
    print(f"router identity in {data_dir}: {identity.fingerprint}", flush=True)
    return EXIT_OK


async def _migrate(data_dir: Path, to_kind: str) -> int:
    """Stop the router first: the data directory must not be in use while it is copied."""
    bar = ProgressBar(sys.stderr)
    try:
        queues, messages = await migrate_store(data_dir, to_kind, progress=bar.update)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    finally:
        bar.close()
    print(f"{data_dir}: {queues} queues and {messages} messages now in a {to_kind} store "
          "(counts checked)", flush=True)
    return EXIT_OK


class ProgressBar:
    """One line per phase on a stream, redrawn in place on a terminal, else printed at
    every tenth of the way (so a log file gets a few lines, not thousands)."""

    WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._phase: str | None = None
        self._shown = -1

    def update(self, phase: str, done: int, total: int) -> None:
        if phase != self._phase:
            self.close()
            self._phase, self._shown = phase, -1
        tenth = 10 if total == 0 else done * 10 // total
        if not self._tty and tenth == self._shown:
            return
        self._shown = tenth
        filled = self.WIDTH if total == 0 else done * self.WIDTH // total
        line = f"{phase:>8} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}"
        self._stream.write(("\r" + line) if self._tty else line + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._phase is not None:
            self._stream.write("\n")
            self._stream.flush()
        self._phase = None


async def _serve(config: RouterConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            info: RouterInfo = await nursery.start(serve_router, config)
            freeze_loaded_state()
            start_gc_policy(nursery, info.router)
            print(f"smp-router listening on {info.url} address {info.address}", flush=True)
            async for signum in signals:
                log.info("stopping on %s", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()


def freeze_loaded_state() -> None:
    """Keep what is alive once the stores are loaded out of later full collections.

    Queue records, stored messages and the program itself live as long as the
    process; a full gc pass walks every tracked object, which with 100k loaded
    queues is about 100 ms of a stalled router (bench/RESULTS.md). Frozen
    objects are still freed by reference counting when they go.
    """
    gc.collect()
    gc.freeze()


def start_gc_policy(nursery: trio.Nursery, router: Router) -> GcPolicy:
    """Keep the collector's pauses short from now on (gc_policy.py)."""
    policy = GcPolicy()
    nursery.start_soon(policy.run, lambda: router.counters.connections_total)
    return policy


def _report(exc: BaseException) -> int:
    """One stderr line and an exit code for a failure; bugs are logged in full."""
    cause = _innermost(exc)
    if isinstance(cause, ConfigError | IdentityError):
        sys.stderr.write(f"smp-router: error: {cause}\n")
        return EXIT_USAGE
    if isinstance(cause, StoreOpenError | MigrationCheckError):
        sys.stderr.write(f"smp-router: error: {cause}\n")
        return EXIT_FAILED
    if isinstance(cause, KeyboardInterrupt):
        return EXIT_OK
    if isinstance(cause, OSError):
        sys.stderr.write(f"smp-router: cannot start: {cause.strerror or cause}\n")
        return EXIT_FAILED
    log.error("router failed: %r", cause, exc_info=log.isEnabledFor(logging.DEBUG))
    return EXIT_FAILED


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (trio wraps errors of nurseries)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
