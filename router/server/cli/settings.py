"""What `serve` (and `gateway`, `control`, `config check`) runs with: the
defaults, then the configuration file, then the flags, made into one
`RouterConfig`. Every flag's destination is a setting name of
`config_file.KEYS`; the listener's bounds come from the settings' table.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from store import read_store_kind

from ..settings.config import (
    DELIVERY_MODES,
    FSYNC_POLICIES,
    STORE_KINDS,
    ConfigError,
    RouterConfig,
)
from ..settings.config_file import (
    CONFIG_FILE_NAME,
    DEFAULTS,
    INFORMATION_KEYS,
    LISTENER_SETTINGS,
    LOG_LEVELS,
    parse_count,
    parse_number,
    parse_port_number,
    parse_stats_interval,
    read_config_file,
)
from ..settings.edge_limits import CONFIGURABLE_BOUNDS
from ..settings.store_key import check_store_key

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



def _flag_type(parse: Callable[[str], object]) -> Callable[[str], object]:
    """A configuration file value parser as an argparse type: the same check and the same
    plain words for a flag (`argument --quota: must be a whole number, at least 1, not '0'`)."""

    def convert(text: str) -> object:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return convert


COUNT, NUMBER = _flag_type(parse_count), _flag_type(parse_number)
PORT = _flag_type(parse_port_number)


def add_config_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", type=Path,
                        help="identity, stores, stats log and smp-router.ini (default: "
                        f"{default_data_dir()})")
    source.add_argument("--config", type=Path,
                        help="configuration file (default: smp-router.ini in the data "
                        "directory, if there is one)")


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """Every flag's destination is a setting name of config_file.KEYS (defaults there)."""
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=PORT, help="port (default 5224); 0 picks a free one")
    serve.add_argument("--public-host",
                       help="host name clients use, printed in the smp:// address")
    serve.add_argument("--store", choices=STORE_KINDS,
                       help="where queues and messages are kept (default: the kind in the "
                       f"data directory, else {DEFAULT_STORE}); with --store memory and "
                       "no data directory nothing is kept")
    serve.add_argument("--fsync", choices=FSYNC_POLICIES,
                       help="when stored data is forced to disk: never, batch (one fsync "
                       "per short window of writes; the default), always")
    serve.add_argument("--after-failed-save", action="store_true",
                       help="memory store: start although the last run did not finish "
                       "saving (killed, or its snapshot failed), from the last complete "
                       "save; what came after it is lost")
    serve.add_argument("--skip-corrupt", action="store_true",
                       help="start even if a store log has a corrupt line (it is left out)")
    serve.add_argument("--message-ttl", type=NUMBER,
                       help="seconds an undelivered message is kept (default 21 days)")
    serve.add_argument("--expire-interval", type=NUMBER,
                       help="seconds between passes that remove expired messages")
    serve.add_argument("--expire-on-send", action="store_true",
                       help="also remove a queue's expired messages on every SEND to it")
    serve.add_argument("--stats-log", type=Path,
                       help=f"CSV statistics log (default: {STATS_LOG_NAME} in the data "
                       "directory, if there is one)")
    serve.add_argument("--no-stats-log", action="store_false", dest="log_stats",
                       help="write no statistics log")
    serve.add_argument("--stats-interval", type=_flag_type(parse_stats_interval),
                       help="seconds per stats log line; must divide a day")
    serve.add_argument("--quota", type=COUNT, help="messages per queue (default 128)")
    serve.add_argument("--delivery", choices=DELIVERY_MODES)
    serve.add_argument("--password",
                       help="basic-auth password required to create queues (visible to "
                       "other users in `ps`: prefer create_password in the configuration)")
    serve.add_argument("--send-queue-size", type=COUNT,
                       help="response batches buffered per connection")
    serve.add_argument("--stalled-writer-timeout", type=NUMBER,
                       help="seconds a client may take to read one block before it is dropped")
    serve.add_argument("--end-batch-interval", type=NUMBER,
                       help="seconds between flushes of END/DELD events")
    serve.add_argument("--metrics-port", type=PORT,
                       help="serve Prometheus metrics on this port at /metrics")
    serve.add_argument("--metrics-host", help="interface for the metrics (default 127.0.0.1)")
    serve.add_argument("--control-port", type=PORT,
                       help="serve control commands on 127.0.0.1 at this port (the "
                       "passwords are set in the configuration file)")
    _add_listener_arguments(serve)
    serve.add_argument("--log-level", choices=LOG_LEVELS)
    serve.add_argument("--log-file", type=Path, help="append the log to this file")


# The listener's limits: flag, type, help (README "Limits of the listener"); each
# sets the RouterConfig field (and the [TRANSPORT] key) of the same name.
_LISTENER_FLAGS: tuple[tuple[str, Callable[[str], object], str], ...] = (
    *((f"--{bound.name.replace('_', '-')}", NUMBER if bound.kind is float else COUNT,
       bound.help) for bound in CONFIGURABLE_BOUNDS),
    ("--idle-timeout", NUMBER, "drop clients without subscriptions silent this long"),
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
    "command", "config", "config_command", "words", "role", "allow_origin", "allow_host",
    "web_root",
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


def check_store_key_of(args: argparse.Namespace, config: RouterConfig) -> None:
    """A store kind from the configuration file that the data directory contradicts is
    the file's error (FILE:LINE), not only the store's; a --store flag is its own."""
    if getattr(args, "store", None) is None and config.data_dir is not None:
        check_store_key(config_file_path(args), config.data_dir,
                        read_store_kind(config.data_dir))


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    return config_from_settings(effective_settings(args))


def _idle_timeout(s: dict[str, object]) -> float | None:
    """--idle-timeout, else [INACTIVE_CLIENTS] ttl when disconnect is on."""
    if s.get("idle_timeout") is not None:
        return s["idle_timeout"]  # type: ignore[return-value]
    return s["inactive_ttl"] if s["inactive_disconnect"] else None  # type: ignore[return-value]


def _store_options(s: dict[str, object], store: str) -> dict[str, object]:
    """The options of the store kind that the settings change from its defaults."""
    options: dict[str, object] = {"skip_corrupt": True} if s["skip_corrupt"] else {}
    if store == "memory" and s["after_failed_save"]:
        options["after_failed_save"] = True
    return options


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
        store_options=_store_options(s, store),
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
        new_queue_address_rate=s["new_queue_address_rate"],
        new_queue_address_burst=s["new_queue_address_burst"],
        new_queue_total_rate=s["new_queue_total_rate"],
        new_queue_total_burst=s["new_queue_total_burst"],
        control_login_delay=s["control_login_delay"],
        control_lockout_after=s["control_lockout_after"],
        control_max_sessions=s["control_max_sessions"],
        metrics_max_connections=s["metrics_max_connections"],
        memory_store_max_bytes=s["memory_store_max_bytes"],
        idle_timeout=_idle_timeout(s),
        **{name: s[name] for name in LISTENER_SETTINGS},
        information=information,
    )  # type: ignore[arg-type]
