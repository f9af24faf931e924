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
    DEFAULT_QUEUE_CACHE,
    ConfigError,
    RouterConfig,
)
from ..settings.config_file import (
    AUTO_WORKERS,
    CONFIG_FILE_NAME,
    DAY,
    DEFAULTS,
    INFORMATION_KEYS,
    KEYS,
    LISTENER_SETTINGS,
    Key,
    display,
    parse_count,
    parse_number,
    parse_port_number,
    plain_number,
    read_config_file,
)
from ..settings.store_key import check_store_key
from ..settings.workers import auto_workers, usable_cores

# Settings `config check` shows as "(set)", never in clear.
SECRET_SETTINGS = ("password", "control_admin_password", "control_user_password",
                   "proxy_password", "db_connection")
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


# The topics of `serve --help`: one group of flags per section of the configuration file.
TOPICS = {
    "STORE_LOG": "store and messages (file section [STORE_LOG])",
    "AUTH": "who may create queues (file section [AUTH]; the control port's passwords "
            "are set only in the file)",
    "TRANSPORT": "network, listener limits, TLS, operation ports (file section [TRANSPORT])",
    "LIMITS": "limits against abuse (file section [LIMITS])",
    "PROXY": "forwarding for clients: private message routing (file section [PROXY]; its "
             "password is set only in the file)",
    "INACTIVE_CLIENTS": "inactive clients (file section [INACTIVE_CLIENTS])",
    "LOG": "log (file section [LOG])",
}


_FILE_UNITS = {DAY: "days"}  # the unit of a key whose flag takes seconds (Key.scale)


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """One flag per key of the settings table (config_file.KEYS) that has one, in a group
    per section, each flag's help the key's with its default and the key it overrides;
    the destination is the key's setting name."""
    groups = {section: serve.add_argument_group(title) for section, title in TOPICS.items()}
    for key in KEYS:
        name = key.flag_name
        if name is None:
            continue
        group = groups[key.section]
        where = f"[{key.section}] {key.name}"
        if key.switch is not None:
            group.add_argument(name, dest=key.setting, action="store_const", const=key.switch,
                               help=f"{key.flag_help or key.doc} (file: {where})")
            continue
        if key.default is None:
            default_text = ""
        elif key.flag_parse is not None:  # the flag's own unit: the setting's value
            in_file = display(key, key.default)
            unit = _FILE_UNITS.get(key.scale, "")
            default_text = f"default {plain_number(key.default)} = {in_file} {unit}; "
            where = f"{where}, in {unit}" if unit else where
        else:
            default_text = f"default {display(key, key.default)}; "
        metavar = "{" + ",".join(key.choices) + "}" if key.choices else _metavar(key)
        group.add_argument(
            name, dest=key.setting, metavar=metavar,
            type=_flag_type(key.flag_parse or key.parse),
            help=f"{key.flag_help or key.doc} ({default_text}file: {where})",
        )
    groups["INACTIVE_CLIENTS"].add_argument(
        "--idle-timeout", type=NUMBER, metavar="SECONDS",
        help="disconnect clients without subscriptions that sent nothing this many seconds "
        "(file: [INACTIVE_CLIENTS] disconnect and ttl)")


_METAVARS = {"new_queues": "on|off", "new_queues_per_second": "N|off", "tls_cert": "PEM",
             "tls_key": "PEM", "stats_log": "PATH", "file": "PATH",
             "memory_store_max_bytes": "SIZE|off", "create_password": "PASSWORD",
             "own_server_domains": "NAMES", "allow_destinations": "NETWORKS",
             "new_queues_per_second_per_address": "N|off", "new_queues_per_second_total": "N|off",
             "new_queues_burst_per_address": "N", "new_queues_burst_total": "N",
             "control_lockout_after": "N", "control_max_sessions": "N", "workers": "N|auto",
             "metrics_max_connections": "N"}


def _metavar(key: Key) -> str:
    if key.name in _METAVARS:
        return _METAVARS[key.name]
    if key.doc.startswith("seconds") or (key.flag_help or "").startswith("seconds"):
        return "SECONDS"
    if key.parse is parse_count:
        return "N"
    return key.name.split("_")[-1].upper()


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
    if store == "sqlite" and s["queue_cache"] != DEFAULT_QUEUE_CACHE:
        options["cache_size"] = s["queue_cache"]
    if store == "postgres":
        for name in POSTGRES_SETTINGS:
            if s.get(name) is not None:
                value = s[name]
                options[name] = int(value) if name == "db_deleted_ttl" else value  # type: ignore[call-overload]
    return options


POSTGRES_SETTINGS = ("db_connection", "db_schema", "db_pool_size", "db_deleted_ttl")


def _store_kind(s: dict[str, object]) -> str | None:
    """`store`, or postgres when the reference router's store_queues/store_messages say
    `database`; ConfigError when the two contradict each other."""
    store = s["store"]
    database = s.get("store_queues") or s.get("store_messages")
    if database is None:
        return store  # type: ignore[return-value]
    if store not in (None, database):
        raise ConfigError(
            f"store = {store} contradicts store_queues/store_messages = database "
            "(the postgres store): keep one of them"
        )
    return database  # type: ignore[return-value]


def _workers(value: object) -> int:
    """The count of workers: `auto` resolved on this machine (settings/workers.py)."""
    return auto_workers(usable_cores()) if value == AUTO_WORKERS else int(value)  # type: ignore[call-overload]


def config_from_settings(s: dict[str, object]) -> RouterConfig:
    store, data_dir = store_and_data_dir(_store_kind(s), s["data_dir"])  # type: ignore[arg-type]
    stats_log = s["stats_log"]
    if stats_log is None and data_dir is not None:
        stats_log = data_dir / STATS_LOG_NAME
    information = tuple(
        (name, str(s[f"info_{name}"])) for name in INFORMATION_KEYS if s.get(f"info_{name}")
    )
    password, proxy_password = s["password"], s["proxy_password"]
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
        drain_period=s["drain_period"],
        workers=_workers(s["workers"]),
        workers_auto=s["workers"] == AUTO_WORKERS,
        allow_proxy=s["allow_proxy"],
        proxy_password=None if proxy_password is None else str(proxy_password).encode(),
        proxy_max_connections=s["proxy_max_connections"],
        proxy_connect_timeout=s["proxy_connect_timeout"],
        proxy_answer_timeout=s["proxy_answer_timeout"],
        proxy_idle_timeout=s["proxy_idle_timeout"],
        proxy_error_hold=s["proxy_error_hold"],
        proxy_client_concurrency=s["proxy_client_concurrency"],
        proxy_own_domains=s["proxy_own_domains"] or (),
        proxy_connects_per_address=s["proxy_connects_per_address"],
        proxy_max_connections_per_address=s["proxy_max_connections_per_address"],
        proxy_allow_destinations=s["proxy_allow_destinations"] or (),
        **{name: s[name] for name in LISTENER_SETTINGS},
        information=information,
    )  # type: ignore[arg-type]
