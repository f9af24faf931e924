"""`smp-router`: the command line (a contract other tools rely on exactly).

    smp-router serve [--config FILE | --data-dir DIR] [flags]
    smp-router init --data-dir DIR
    smp-router renew-online-cert --data-dir DIR
    smp-router config check [--config FILE | --data-dir DIR]
    smp-router control [--config FILE | --data-dir DIR] [--role user] [COMMAND]
    smp-router migrate-store --data-dir DIR --to sqlite
    smp-router database import|export --data-dir DIR    (migrate-store to and from postgres)
    smp-router workers-move --data-dir DIR --workers 4
    smp-router gateway --port 8080 --store memory    (router/gateway/cli.py)
    smp-router --version

Settings come from the defaults, then the configuration file (`--config`,
else `smp-router.ini` in the data directory if there is one; `init` writes a
commented one; config_file.py), then the flags given, each replacing the one
before. Without `--store`, `serve` keeps its queues and messages: it uses the
kind already in the data directory, or the sqlite store in a fresh one, and
the data directory defaults to `$XDG_DATA_HOME/smp-router` (or
`~/.local/share/smp-router`). `--store memory` without `--data-dir` keeps
nothing and reads no configuration file; with one, undelivered messages are
saved on SIGINT/SIGTERM and restored at the next start.

`serve` prints ONE line to stdout, flushed, once the router accepts
connections; it contains `ws://HOST:PORT` and the router's address
`smp://KEYHASH@HOST:PORT` (HOST there is the public host, never a wildcard).
SIGINT and SIGTERM stop it cleanly (exit 0). Anything that stops it from
starting (a bad flag or setting, an address in use, an unknown host, a path
it cannot use) is one line on stderr naming what is concerned, and exit code
2; never a traceback. Operator messages go to stderr (or `--log-file`)
through `logging`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from argparse import SUPPRESS
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import trio

from router.gateway.cli import add_gateway_command, gateway_config, run_gateway
from store import MigrationCheckError

from ..edge.identity import IdentityError
from ..open_stores import StoreOpenError
from ..ops.control import run_control_commands
from ..ops.info import router_version
from ..settings.config import (
    STORE_KINDS,
    ConfigError,
    RouterConfig,
    StartupError,
    os_error_reason,
)
from ..settings.config_file import (
    LOG_LEVELS,
)
from ..settings.datadir import lock_data_dir
from ..settings.workers import auto_reason, usable_cores
from ..workers.layout import check_worker_count, with_auto_workers
from ..workers.owner_exceptions import with_owner_exceptions
from ..workers.seat import label_log_records, seat_from_environment
from ..workers.supervisor import supervise
from .check import config_check
from .database import add_database_command, add_database_flags, run_database_command
from .init import init_data_dir, renew_online_cert
from .lifecycle import Reload, Reloaded
from .migrate import database_settings, migrate
from .serve import serve
from .settings import (
    PORT,
    add_config_source,
    add_serve_flags,
    check_store_key_of,
    config_from_settings,
    effective_settings,
)
from .workers_move import add_workers_move_command, workers_move

log = logging.getLogger("smp-router")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage text and then the error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="smp-router", description="SimpleX Messaging Protocol router")
    parser.add_argument("--version", action="version", version=f"smp-router {router_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Flags left out are absent from the namespace (SUPPRESS), so that the configuration
    # file's value, or the default, applies to them (`effective_settings`).
    serve = commands.add_parser("serve", help="run the router", argument_default=SUPPRESS)
    add_config_source(serve)
    add_serve_flags(serve)
    init = commands.add_parser(
        "init", help="create the router identity and a commented configuration file"
    )
    init.add_argument("--data-dir", type=Path, required=True,
                      help="the router's data directory (created if missing)")
    init.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                      help="log level while it runs (default info)")
    renew = commands.add_parser(
        "renew-online-cert",
        help="replace the online certificate; the address (identity certificate) stays",
    )
    renew.add_argument("--data-dir", type=Path, required=True,
                       help="the router's data directory, holding its identity")
    renew.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                       help="log level while it runs (default info)")
    migrate = commands.add_parser(
        "migrate-store", help="copy a data directory's queues and messages to another store kind"
    )
    migrate.add_argument("--data-dir", type=Path, required=True,
                         help="the stopped router's data directory")
    migrate.add_argument("--to", choices=STORE_KINDS, required=True, dest="to_kind",
                         help="the store kind to move to; the directory's smp-router.ini "
                         "is set to it if it names a kind")
    add_database_flags(migrate)  # for the postgres store, on either side
    migrate.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                         help="log level while it runs (default info)")
    config = commands.add_parser("config", help="check the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_commands.add_parser(
        "check", help="print the configuration in effect; exit 2 if it has an error",
        argument_default=SUPPRESS,
    )
    add_config_source(check)
    control = commands.add_parser(
        "control", help="send control commands to the running router (its control port and "
        "password from the configuration)", argument_default=SUPPRESS,
    )
    add_config_source(control)
    control.add_argument("--port", type=PORT, dest="control_port",
                         help="the control port (default: control_port of the configuration)")
    control.add_argument("--role", choices=("admin", "user"), default="admin",
                         help="whose password to authenticate with (default admin)")
    control.add_argument("words", nargs="*", metavar="COMMAND", default=[],
                         help="one command, e.g. `stats`; none: commands from stdin, one a line")
    add_database_command(commands)
    add_workers_move_command(commands)
    add_gateway_command(commands, serve)
    return parser



PRIVATE_UMASK = 0o077  # what the router creates is its own: stores, stats, logs, keys


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The stores hold queue keys and undelivered messages; SQLite and the journal
    # create files (WAL, message files) without a mode of the router's choosing.
    # Restored on return, for a program that calls main() in its own process.
    previous_umask = os.umask(PRIVATE_UMASK)
    try:
        if args.command in ("serve", "gateway"):
            settings = effective_settings(args)
            _setup_logging(str(settings["log_level"]), settings["log_file"])  # type: ignore[arg-type]
            config = config_from_settings(settings)
            check_store_key_of(args, config)
            seat = seat_from_environment() if args.command == "serve" else None
            if seat is not None:  # the supervisor holds the lock and checked the directory
                label_log_records(seat.index)
                seat = replace(seat, ownership=with_owner_exceptions(seat.ownership,
                                                                     config.data_dir))
                # `auto` is the supervisor's to resolve: a worker runs in the seat's count
                config = replace(config, workers=seat.ownership.workers, workers_auto=False)
                trio.run(serve, config, _reloader(args), seat)
                return EXIT_OK
            with lock_data_dir(config.data_dir) if config.data_dir is not None else nullcontext():
                if args.command == "gateway":
                    trio.run(run_gateway, gateway_config(args, config))
                    return EXIT_OK
                config = _resolved_workers(config)
                check_worker_count(config)
                if config.workers > 1:
                    given = list(sys.argv[1:] if argv is None else argv)
                    serve_args = given[given.index("serve") + 1:]
                    trio.run(supervise, config, serve_args, _reloader(args))
                else:
                    trio.run(serve, config, _reloader(args))
            return EXIT_OK
        _setup_logging(getattr(args, "log_level", "info"), None)
        if args.command == "init":
            with lock_data_dir(args.data_dir):
                init_data_dir(args.data_dir)
            return EXIT_OK
        if args.command == "config":
            config_check(args)
            return EXIT_OK
        if args.command == "renew-online-cert":
            renew_online_cert(args.data_dir)
            return EXIT_OK
        if args.command == "control":
            return run_control_commands(effective_settings(args), args.role,
                                        _control_lines(args.words))
        with lock_data_dir(args.data_dir, create=False):
            if args.command == "database":
                run_database_command(args)
                return EXIT_OK
            if args.command == "workers-move":
                trio.run(workers_move, args)
                return EXIT_OK
            database = database_settings(args.data_dir, {
                "db_connection": args.db_connection, "db_schema": args.db_schema,
                "db_pool_size": args.db_pool_size,
            })
            trio.run(migrate, args.data_dir, args.to_kind, database)
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK  # a SIGINT before the signal handler was in place
    except BaseException as e:  # noqa: BLE001 - the one place that turns failures into exit codes
        return _report(e)
    finally:
        os.umask(previous_umask)


def _resolved_workers(config: RouterConfig) -> RouterConfig:
    """`workers = auto` resolved (settings/workers.py), the count and why in the log."""
    if not config.workers_auto:
        return config
    config, kept = with_auto_workers(config)
    if kept is not None:
        log.info("workers = auto: %d, the count data directory %s was made for (change it "
                 "with smp-router workers-move)", kept, config.data_dir)
    else:
        log.info("workers = auto: %s", auto_reason(usable_cores()))
    return config


def _reloader(args: argparse.Namespace) -> Reload:
    """SIGHUP's reading of the configuration: the file and the flags, as at the start;
    the log handler is made anew (a log file moved by logrotate is opened again)."""
    level = [str(effective_settings(args)["log_level"])]

    def reload() -> Reloaded:
        settings = effective_settings(args)
        config = config_from_settings(settings)
        check_store_key_of(args, config)
        log_file = settings["log_file"]
        _setup_logging(str(settings["log_level"]), log_file)  # type: ignore[arg-type]
        done = [f"[LOG] file {log_file} opened again"] if log_file is not None else []
        if settings["log_level"] != level[0]:
            done.append(f"[LOG] level {level[0]} -> {settings['log_level']}")
            level[0] = str(settings["log_level"])
        return Reloaded(config, tuple(done))

    return reload


def _control_lines(words: list[str]) -> list[str]:
    return [" ".join(words)] if words else [line.strip() for line in sys.stdin if line.strip()]


def _setup_logging(level: str, log_file: Path | None) -> None:
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        try:
            handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as e:
            raise StartupError(f"cannot open the log file {log_file}: {os_error_reason(e)}") from e
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)




def _report(exc: BaseException) -> int:
    """One stderr line and an exit code for a failure; bugs are logged in full.

    Everything that stops the router from starting (a bad setting, a file or an
    address it cannot use) is exit code 2, the message naming what is concerned.
    """
    cause = _innermost(exc)
    if isinstance(cause, KeyboardInterrupt):
        return EXIT_OK
    if isinstance(cause, ConfigError | IdentityError | StartupError | StoreOpenError):
        sys.stderr.write(f"smp-router: error: {cause}\n")
        return EXIT_USAGE
    if isinstance(cause, MigrationCheckError):
        sys.stderr.write(f"smp-router: error: {cause}\n")
        return EXIT_FAILED
    if isinstance(cause, OSError):  # a start-up step that did not name its path itself
        where = f"{cause.filename}: " if cause.filename else ""
        sys.stderr.write(f"smp-router: error: {where}{os_error_reason(cause)}\n")
        return EXIT_USAGE
    log.error("router failed: %r", cause, exc_info=log.isEnabledFor(logging.DEBUG))
    return EXIT_FAILED


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (trio wraps errors of nurseries)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
