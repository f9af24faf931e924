"""`smp-router`: the command line (a contract other tools rely on exactly).

    smp-router serve --host 127.0.0.1 --port 5224 --store memory
    smp-router init --data-dir DIR
    smp-router migrate-store --data-dir DIR --to sqlite

`serve` prints ONE line to stdout, flushed, once the router accepts
connections; it contains `ws://HOST:PORT` and the router's address
`smp://KEYHASH@HOST:PORT`. SIGINT and SIGTERM stop it cleanly (exit 0). A bad
flag or configuration gives one line on stderr and exit code 2, a failure to
start (e.g. the port is taken) one line and exit code 1; never a traceback.
Operator messages go to stderr through `logging`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import trio

from store import migrate_store

from .config import DELIVERY_MODES, STORE_KINDS, ConfigError, RouterConfig
from .identity import IdentityError, load_or_create_identity
from .router import RouterInfo, serve_router

log = logging.getLogger("smp-router")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
LOG_LEVELS = ("debug", "info", "warning", "error")


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
    serve.add_argument("--store", choices=STORE_KINDS, default="memory")
    serve.add_argument("--data-dir", type=Path,
                       help="identity and stores; without it (memory store only) every "
                       "start has a new identity")
    serve.add_argument("--quota", type=_positive_int, default=128, help="messages per queue")
    serve.add_argument("--delivery", choices=DELIVERY_MODES, default="single-task")
    serve.add_argument("--password", help="basic-auth password required to create queues")
    serve.add_argument("--send-queue-size", type=_positive_int, default=64,
                       help="response batches buffered per connection")
    serve.add_argument("--stalled-writer-timeout", type=float, default=30.0,
                       help="seconds a client may take to read one block before it is dropped")
    serve.add_argument("--end-batch-interval", type=float, default=0.1,
                       help="seconds between flushes of END/DELD events")
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


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    return RouterConfig(
        host=args.host,
        port=args.port,
        store=args.store,
        data_dir=args.data_dir,
        delivery=args.delivery,
        quota=args.quota,
        password=None if args.password is None else args.password.encode(),
        send_queue_size=args.send_queue_size,
        stalled_writer_timeout=args.stalled_writer_timeout,
        end_batch_interval=args.end_batch_interval,
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
    try:
        queues, messages = await migrate_store(data_dir, to_kind)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    print(f"{data_dir}: {queues} queues and {messages} messages now in a {to_kind} store",
          flush=True)
    return EXIT_OK


async def _serve(config: RouterConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            info: RouterInfo = await nursery.start(serve_router, config)
            print(f"smp-router listening on {info.url} address {info.address}", flush=True)
            async for signum in signals:
                log.info("stopping on %s", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()


def _report(exc: BaseException) -> int:
    """One stderr line and an exit code for a failure; bugs are logged in full."""
    cause = _innermost(exc)
    if isinstance(cause, ConfigError | IdentityError):
        sys.stderr.write(f"smp-router: error: {cause}\n")
        return EXIT_USAGE
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
