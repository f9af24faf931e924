"""`smp-router`: the command line (a contract other tools rely on exactly).

    smp-router serve [--config FILE | --data-dir DIR] [flags]
    smp-router init --data-dir DIR
    smp-router config check [--config FILE | --data-dir DIR]
    smp-router control [--config FILE | --data-dir DIR] [--role user] [COMMAND]
    smp-router migrate-store --data-dir DIR --to sqlite
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
import gc
import logging
import os
import signal
import sys
from argparse import SUPPRESS
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import NoReturn, TextIO

import trio

from router.gateway.cli import add_gateway_command, gateway_config, run_gateway
from store import MigrationCheckError, migrate_store, read_store_kind

from ..edge.identity import IdentityError, load_or_create_identity
from ..open_stores import StoreOpenError
from ..ops.control import run_control_commands
from ..ops.gc_policy import GcPolicy
from ..ops.info import information_page, router_version
from ..router import Router, RouterInfo, listener_tls, serve_router
from ..settings.config import (
    DELIVERY_MODES,
    FSYNC_POLICIES,
    STORE_KINDS,
    WILDCARD_HOSTS,
    ConfigError,
    RouterConfig,
    StartupError,
    os_error_reason,
)
from ..settings.config_file import (
    CONFIG_FILE_NAME,
    DEFAULTS,
    INFORMATION_KEYS,
    LISTENER_SETTINGS,
    LOG_LEVELS,
    read_config_file,
    render_config,
    template,
)
from ..settings.datadir import lock_data_dir
from ..settings.edge_limits import CONFIGURABLE_BOUNDS

log = logging.getLogger("smp-router")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Settings `config check` shows as "(set)", never in clear.
SECRET_SETTINGS = ("password", "control_admin_password", "control_user_password")
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
    parser.add_argument("--version", action="version", version=f"smp-router {router_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Flags left out are absent from the namespace (SUPPRESS), so that the configuration
    # file's value, or the default, applies to them (`effective_settings`).
    serve = commands.add_parser("serve", help="run the router", argument_default=SUPPRESS)
    _add_config_source(serve)
    _add_serve_flags(serve)
    init = commands.add_parser(
        "init", help="create the router identity and a commented configuration file"
    )
    init.add_argument("--data-dir", type=Path, required=True)
    init.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    migrate = commands.add_parser(
        "migrate-store", help="copy a data directory's queues and messages to another store kind"
    )
    migrate.add_argument("--data-dir", type=Path, required=True)
    migrate.add_argument("--to", choices=STORE_KINDS, required=True, dest="to_kind")
    migrate.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    config = commands.add_parser("config", help="check the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_commands.add_parser(
        "check", help="print the configuration in effect; exit 2 if it has an error",
        argument_default=SUPPRESS,
    )
    _add_config_source(check)
    control = commands.add_parser(
        "control", help="send control commands to the running router (its control port and "
        "password from the configuration)", argument_default=SUPPRESS,
    )
    _add_config_source(control)
    control.add_argument("--port", type=int, dest="control_port",
                         help="the control port (default: control_port of the configuration)")
    control.add_argument("--role", choices=("admin", "user"), default="admin",
                         help="whose password to authenticate with (default admin)")
    control.add_argument("words", nargs="*", metavar="COMMAND", default=[],
                         help="one command, e.g. `stats`; none: commands from stdin, one a line")
    add_gateway_command(commands, serve)
    return parser


def _add_config_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", type=Path,
                        help="identity, stores, stats log and smp-router.ini (default: "
                        f"{default_data_dir()})")
    source.add_argument("--config", type=Path,
                        help="configuration file (default: smp-router.ini in the data "
                        "directory, if there is one)")


def _add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """Every flag's destination is a setting name of config_file.KEYS (defaults there)."""
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 5224); 0 picks a free one")
    serve.add_argument("--public-host",
                       help="host name clients use, printed in the smp:// address")
    serve.add_argument("--store", choices=STORE_KINDS,
                       help="where queues and messages are kept (default: the kind in the "
                       f"data directory, else {DEFAULT_STORE}); with --store memory and "
                       "no data directory nothing is kept")
    serve.add_argument("--fsync", choices=FSYNC_POLICIES,
                       help="when stored data is forced to disk: never, batch (one fsync "
                       "per short window of writes; the default), always")
    serve.add_argument("--skip-corrupt", action="store_true",
                       help="start even if a store log has a corrupt line (it is left out)")
    serve.add_argument("--message-ttl", type=float,
                       help="seconds an undelivered message is kept (default 21 days)")
    serve.add_argument("--expire-interval", type=float,
                       help="seconds between passes that remove expired messages")
    serve.add_argument("--expire-on-send", action="store_true",
                       help="also remove a queue's expired messages on every SEND to it")
    serve.add_argument("--stats-log", type=Path,
                       help=f"CSV statistics log (default: {STATS_LOG_NAME} in the data "
                       "directory, if there is one)")
    serve.add_argument("--no-stats-log", action="store_false", dest="log_stats",
                       help="write no statistics log")
    serve.add_argument("--stats-interval", type=int,
                       help="seconds per stats log line; must divide a day")
    serve.add_argument("--quota", type=_positive_int, help="messages per queue (default 128)")
    serve.add_argument("--delivery", choices=DELIVERY_MODES)
    serve.add_argument("--password",
                       help="basic-auth password required to create queues (visible to "
                       "other users in `ps`: prefer create_password in the configuration)")
    serve.add_argument("--send-queue-size", type=_positive_int,
                       help="response batches buffered per connection")
    serve.add_argument("--stalled-writer-timeout", type=float,
                       help="seconds a client may take to read one block before it is dropped")
    serve.add_argument("--end-batch-interval", type=float,
                       help="seconds between flushes of END/DELD events")
    serve.add_argument("--metrics-port", type=int,
                       help="serve Prometheus metrics on this port at /metrics")
    serve.add_argument("--metrics-host", help="interface for the metrics (default 127.0.0.1)")
    serve.add_argument("--control-port", type=int,
                       help="serve control commands on 127.0.0.1 at this port (the "
                       "passwords are set in the configuration file)")
    _add_listener_arguments(serve)
    serve.add_argument("--log-level", choices=LOG_LEVELS)
    serve.add_argument("--log-file", type=Path, help="append the log to this file")


# The listener's limits: flag, type, help (README "Limits of the listener"); each
# sets the RouterConfig field (and the [TRANSPORT] key) of the same name.
_LISTENER_FLAGS: tuple[tuple[str, type, str], ...] = (
    *((f"--{bound.name.replace('_', '-')}", bound.kind, bound.help)
      for bound in CONFIGURABLE_BOUNDS),
    ("--idle-timeout", float, "drop clients without subscriptions silent this long"),
    ("--tls-cert", Path, "PEM certificate chain: listen for wss:// (with --tls-key)"),
    ("--tls-key", Path, "the certificate's private key"),
)


def _add_listener_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, kind, text in _LISTENER_FLAGS:
        parser.add_argument(flag, type=kind, help=text)


def config_file_path(args: argparse.Namespace) -> Path | None:
    """`--config`, else smp-router.ini in the data directory if it is there."""
    given: Path | None = getattr(args, "config", None)
    if given is not None:
        return given
    data_dir: Path | None = getattr(args, "data_dir", None)
    if data_dir is None and getattr(args, "store", None) == "memory":
        return None  # a router that keeps nothing reads nothing either
    candidate = (data_dir or default_data_dir()) / CONFIG_FILE_NAME
    return candidate if candidate.is_file() else None


def effective_settings(args: argparse.Namespace) -> dict[str, object]:
    """Defaults, then the configuration file, then the flags given."""
    path = config_file_path(args)
    from_file = read_config_file(path) if path is not None else {}
    if path is not None and "data_dir" not in from_file and getattr(args, "config", None) is None:
        from_file["data_dir"] = path.parent
    flags = {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS}
    return {**DEFAULTS, **from_file, **flags}


_NOT_SETTINGS = frozenset({
    "command", "config", "config_command", "words", "role", "allow_origin", "web_root",
})


def store_and_data_dir(store: str | None, data_dir: Path | None) -> tuple[str, Path | None]:
    """The store kind and data directory `serve` uses for its --store and --data-dir."""
    if store == "memory" and data_dir is None:
        return store, None
    data_dir = data_dir if data_dir is not None else default_data_dir()
    if store is None:
        if data_dir.exists() and not data_dir.is_dir():
            raise ConfigError(f"data directory {data_dir} is not a directory")
        store = read_store_kind(data_dir) or DEFAULT_STORE
    return store, data_dir


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    return config_from_settings(effective_settings(args))


def _idle_timeout(s: dict[str, object]) -> float | None:
    """--idle-timeout, else [INACTIVE_CLIENTS] ttl when disconnect is on."""
    if s.get("idle_timeout") is not None:
        return s["idle_timeout"]  # type: ignore[return-value]
    return s["inactive_ttl"] if s["inactive_disconnect"] else None  # type: ignore[return-value]


def config_from_settings(s: dict[str, object]) -> RouterConfig:
    store, data_dir = store_and_data_dir(s["store"], s["data_dir"])  # type: ignore[arg-type]
    stats_log = s["stats_log"]
    if stats_log is None and data_dir is not None:
        stats_log = data_dir / STATS_LOG_NAME
    information = tuple(
        (name, str(s[f"info_{name}"])) for name in INFORMATION_KEYS if s.get(f"info_{name}")
    )
    password = s["password"]
    return RouterConfig(
        host=s["host"], port=s["port"], public_host=s["public_host"],
        store=store, data_dir=data_dir, fsync=s["fsync"],
        message_ttl=s["message_ttl"], expire_interval=s["expire_interval"],
        expire_on_send=s["expire_on_send"],
        stats_log=stats_log if s["log_stats"] else None,
        stats_interval=s["stats_interval"],
        store_options={"skip_corrupt": True} if s["skip_corrupt"] else {},
        delivery=s["delivery"], quota=s["quota"],
        password=None if password is None else str(password).encode(),
        allow_new_queues=s["allow_new_queues"],
        send_queue_size=s["send_queue_size"],
        stalled_writer_timeout=s["stalled_writer_timeout"],
        end_batch_interval=s["end_batch_interval"],
        handshake_timeout=s["handshake_timeout"],
        metrics_host=s["metrics_host"], metrics_port=s["metrics_port"],
        control_port=s["control_port"],
        control_admin_password=s["control_admin_password"],
        control_user_password=s["control_user_password"],
        new_queue_rate=s["new_queue_rate"], new_queue_burst=s["new_queue_burst"],
        memory_store_max_bytes=s["memory_store_max_bytes"],
        idle_timeout=_idle_timeout(s),
        **{name: s[name] for name in LISTENER_SETTINGS},
        information=information,
    )  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("serve", "gateway"):
            settings = effective_settings(args)
            _setup_logging(str(settings["log_level"]), settings["log_file"])  # type: ignore[arg-type]
            config = config_from_settings(settings)
            with lock_data_dir(config.data_dir) if config.data_dir is not None else nullcontext():
                if args.command == "gateway":
                    trio.run(run_gateway, gateway_config(args, config))
                else:
                    trio.run(_serve, config)
            return EXIT_OK
        _setup_logging(getattr(args, "log_level", "info"), None)
        if args.command == "init":
            with lock_data_dir(args.data_dir):
                return _init(args.data_dir)
        if args.command == "config":
            return _config_check(args)
        if args.command == "control":
            return run_control_commands(effective_settings(args), args.role,
                                        _control_lines(args.words))
        with lock_data_dir(args.data_dir, create=False):
            return trio.run(_migrate, args.data_dir, args.to_kind)
    except KeyboardInterrupt:
        return EXIT_OK  # a SIGINT before the signal handler was in place
    except BaseException as e:  # noqa: BLE001 - the one place that turns failures into exit codes
        return _report(e)


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


def _config_check(args: argparse.Namespace) -> int:
    """Print the configuration in effect (passwords hidden); errors go through _report."""
    path = config_file_path(args)
    settings = effective_settings(args)
    config = config_from_settings(settings)
    listener_tls(config)  # what serve does with the files, so that check finds the same errors
    settings.update(store=config.store, data_dir=config.data_dir, stats_log=config.stats_log)
    print(f"# configuration file: {path if path is not None else '(none: defaults)'}")
    print(render_config(settings, secret=SECRET_SETTINGS), end="", flush=True)
    return EXIT_OK


def _init(data_dir: Path) -> int:
    """Create the identity and, unless there is one already, a commented configuration."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"data directory {data_dir} is not a directory")
    identity = load_or_create_identity(data_dir)
    print(f"router identity in {data_dir}: {identity.fingerprint}", flush=True)
    config_file = data_dir / CONFIG_FILE_NAME
    if config_file.exists():
        print(f"configuration kept: {config_file}", flush=True)
    else:
        _write_new_file(config_file, template())
        print(f"configuration written: {config_file}", flush=True)
    return EXIT_OK


def _write_new_file(path: Path, text: str) -> None:
    """Owner-only (it may hold passwords), and never over an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


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
            info.router.info_page = information_page(config, info.address)
            freeze_loaded_state()
            if config.public_host is None and config.host in WILDCARD_HOSTS:
                log.warning("listening on every interface: the address names this machine "
                            "as %s; set public_host if clients know it by another name",
                            config.advertised_host)
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
