"""The INI configuration file: `smp-router.ini` in the data directory or `--config FILE`.

Sections follow the reference SMP server's where a setting means the same
thing (`[STORE_LOG]`, `[AUTH]`, `[TRANSPORT]`, `[INACTIVE_CLIENTS]`,
`[INFORMATION]`); `[LIMITS]` and `[LOG]` are this router's own. `key = value`
and `key: value` are both accepted, keys are case-insensitive, `#` and `;`
start a comment line (there are no comments after a value: a password or a
description may contain `#`).

Every key maps to one *setting*, named as the `serve` flag's argparse
destination, so the file and the command line fill one namespace and a flag
given on the command line simply replaces the file's value (`cli/settings.py`).
Adding a key is one line in `KEYS` (and, for a new field, one in the
RouterConfig built by `cli.config_from_args`); a bound of the listener is a row
of `EDGE_BOUNDS` (edge_limits.py), which gives its key here.

A file that cannot be used raises `ConfigFileError` whose message names the
file, the line and the key: `FILE:LINE: [SECTION] key: what is wrong`.
"""

from __future__ import annotations

import ast
import configparser
import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from .config import (
    DEFAULT_CONTROL_LOCKOUT_AFTER,
    DEFAULT_CONTROL_LOGIN_DELAY,
    DEFAULT_CONTROL_MAX_SESSIONS,
    DEFAULT_DRAIN_PERIOD,
    DEFAULT_EXPIRE_INTERVAL,
    DEFAULT_MEMORY_STORE_MAX_BYTES,
    DEFAULT_MESSAGE_TTL,
    DEFAULT_METRICS_MAX_CONNECTIONS,
    DEFAULT_NEW_QUEUE_ADDRESS_BURST,
    DEFAULT_NEW_QUEUE_ADDRESS_RATE,
    DEFAULT_NEW_QUEUE_BURST,
    DEFAULT_NEW_QUEUE_RATE,
    DEFAULT_NEW_QUEUE_TOTAL_BURST,
    DEFAULT_NEW_QUEUE_TOTAL_RATE,
    DEFAULT_PROXY_ANSWER_TIMEOUT,
    DEFAULT_PROXY_CLIENT_CONCURRENCY,
    DEFAULT_PROXY_CONNECT_TIMEOUT,
    DEFAULT_PROXY_CONNECTS_PER_ADDRESS,
    DEFAULT_PROXY_ERROR_HOLD,
    DEFAULT_PROXY_IDLE_TIMEOUT,
    DEFAULT_PROXY_MAX_CONNECTIONS,
    DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_QUEUE_CACHE,
    DEFAULT_STATS_INTERVAL,
    DELIVERY_MODES,
    FSYNC_POLICIES,
    STORE_KINDS,
    ConfigError,
    RouterConfig,
    check_password,
)
from .edge_limits import CONFIGURABLE_BOUNDS

CONFIG_FILE_NAME = "smp-router.ini"
LOG_LEVELS = ("debug", "info", "warning", "error")
DAY = 86400.0
_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_KEY_LINE = re.compile(r"^\s*([^\s=:#;\[][^=:]*?)\s*[=:]")
_SECTION_LINE = re.compile(r"^\s*\[([^\]]+)\]")


class ConfigFileError(ConfigError):
    """The configuration file cannot be used; the message names file, line and key."""


# --- value parsers: text -> setting (raise ValueError with a short reason) ------------

Parser = Callable[[str], object]


def _text(value: str) -> str | None:
    return value or None


def _path(value: str) -> Path | None:
    return Path(value) if value else None


def _bool(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"must be on or off, not {value!r}")


def _whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"must be a whole number, not {value!r}") from None


def parse_count(value: str) -> int:
    number = _whole(value)
    if number < 1:
        raise ValueError(f"must be a whole number, at least 1, not {value!r}")
    return number


AUTO_WORKERS = "auto"


def parse_workers(value: str) -> int | str:
    """`auto` (resolved at start: settings/workers.py) or a count of workers."""
    if value.strip().lower() == AUTO_WORKERS:
        return AUTO_WORKERS
    try:
        return parse_count(value)
    except ValueError:
        raise ValueError(f"must be auto or a whole number, at least 1, not {value!r}") from None


def parse_number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"must be a number, not {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"must be a positive number, not {value!r}")
    return number


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"must be a number, not {value!r}") from None
    if not (number >= 0 and math.isfinite(number)):
        raise ValueError(f"must be a number, at least 0, not {value!r}")
    return number


def parse_port_number(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ValueError(f"must be a port number, 0 to 65535, not {value!r}")
    return number


def _port(value: str) -> int | None:
    return parse_port_number(value) if value and value.lower() != "off" else None


def parse_stats_interval(value: str) -> int:
    seconds = parse_count(value)
    if DAY % seconds:
        raise ValueError(f"must be a number of seconds that divides a day (86400), not {value!r}")
    return seconds


def _password(value: str) -> str | None:
    if value:
        check_password(value.encode())
    return value or None


def _domains(value: str) -> tuple[str, ...]:
    """`example.net, example.org`: destinations on these hosts or under them."""
    names = tuple(name.strip().lower() for name in value.split(",") if name.strip())
    if any(" " in name or "/" in name for name in names):
        raise ValueError(f"must be host names separated by commas, not {value!r}")
    return names


def _networks(value: str) -> tuple[str, ...]:
    """`10.0.0.0/8, 192.168.1.7`: IP networks or addresses."""
    entries = tuple(entry.strip() for entry in value.split(",") if entry.strip())
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP network or address") from None
    return entries


def _optional_number(value: str) -> float | None:
    return parse_number(value) if value and value.lower() != "off" else None


def _size(value: str) -> int | None:
    """`1073741824`, `512M`, `1G`, `1 GiB`; `off` for no cap."""
    if not value or value.lower() == "off":
        return None
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"must be a size such as 512M or 1G, or off, not {value!r}")
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


def size_text(n: int) -> str:
    """A byte count as the file writes it: `512M`, `1G`; plain bytes if no unit divides it."""
    for unit in ("T", "G", "M", "K"):
        if n and n % _SIZE_UNITS[unit.lower()] == 0:
            return f"{n // _SIZE_UNITS[unit.lower()]}{unit}"
    return str(n)


def plain_number(value: float) -> str:
    """A number without an exponent: `1814400`, `0.1`, never `1.8144e+06`."""
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return format(value, "f").rstrip("0")


def _database_store(value: str) -> str:
    """The reference router's store_queues/store_messages: `database` is the postgres store."""
    if value != "database":
        raise ValueError(
            f"only database (PostgreSQL) is taken here, not {value!r}; choose another kind "
            "with the store key"
        )
    return "postgres"


def _db_store_log(value: str) -> bool:
    """The reference router's db_store_log: on, its postgres store also appends every queue
    change to a store log file. Not here: the schema is the store's one record."""
    if _bool(value):
        raise ValueError(
            "on is not supported: the postgres store keeps no store log beside the database "
            "(back it up with pg_dump, or copy it out with `smp-router database export`); "
            "set it off or remove the line"
        )
    return False


def _postgres_url(value: str) -> str | None:
    if value and not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("must be a postgresql:// URL")
    return value or None


def _sql_name(value: str) -> str | None:
    if value and not re.match(r"^[a-z_][a-z0-9_]{0,62}$", value):
        raise ValueError(f"must be a lower-case SQL name (letters, digits, _), not {value!r}")
    return value or None


def _choice(choices: tuple[str, ...]) -> Parser:
    def parse(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    parse.choices = choices  # type: ignore[attr-defined]  # shown in --help
    return parse


def _field_default(name: str) -> object:
    return next(f.default for f in fields(RouterConfig) if f.name == name)


@dataclass(frozen=True, slots=True)
class Key:
    section: str
    name: str  # as written in the file
    setting: str  # the serve flag's argparse destination
    parse: Parser
    default: object  # what applies when neither the file nor a flag sets it
    doc: str  # one line for the file `init` writes
    scale: float = 1.0  # file value x scale = setting (days -> seconds)
    shown: bool = False  # written uncommented by `init`
    # The `serve` flag (cli/settings.py makes them from this table): "" is `--NAME` with
    # dashes, taking what the file takes; None is no flag (secrets, which `ps` would show,
    # and what only the file sets).
    flag: str | None = ""
    flag_help: str = ""  # where the flag differs from the key (another unit, a switch)
    flag_parse: Parser | None = None  # the flag's own parser (seconds where the file has days)
    switch: bool | None = None  # a flag without a value that sets the setting to this

    @property
    def flag_name(self) -> str | None:
        if self.flag is None:
            return None
        return self.flag or f"--{self.name.replace('_', '-')}"

    @property
    def choices(self) -> tuple[str, ...] | None:
        return getattr(self.parse, "choices", None)


# The order here is the order of the file `init` writes and `config check` prints.
KEYS: tuple[Key, ...] = (
    Key("STORE_LOG", "store", "store", _choice(STORE_KINDS), None,
        "memory, journal, sqlite or postgres; default: the kind already in the data "
        "directory, else sqlite"),
    Key("STORE_LOG", "store_queues", "store_queues", _database_store, None,
        "database: queues in PostgreSQL (the reference router's key; the same as "
        "store = postgres)", flag=None),
    Key("STORE_LOG", "store_messages", "store_messages", _database_store, None,
        "database: messages in PostgreSQL (the reference router's key; the same as "
        "store = postgres)", flag=None),
    Key("STORE_LOG", "db_connection", "db_connection", _postgres_url, None,
        "postgres store: the database, a postgresql:// URL (default: "
        "postgresql://smp@/smp_server_store)",
        flag_help="postgres store: the database, a postgresql:// URL (other users see it "
        "in `ps`: put a password in the file's db_connection or in ~/.pgpass)"),
    Key("STORE_LOG", "db_schema", "db_schema", _sql_name, None,
        "postgres store: the schema that holds the router's tables (default: smp_server)"),
    Key("STORE_LOG", "db_pool_size", "db_pool_size", parse_count, None,
        "postgres store: connections to the database at most (default: 10)"),
    Key("STORE_LOG", "db_deleted_ttl", "db_deleted_ttl", parse_number, None,
        "postgres store: days a deleted queue's row is kept before it is removed "
        "(default: 21)", scale=DAY, flag_help="postgres store: seconds a deleted queue's "
        "row is kept before it is removed (default: 21 days)", flag_parse=parse_number),
    Key("STORE_LOG", "db_store_log", "db_store_log", _db_store_log, None,
        "postgres store: off only (the reference router's store log written beside the "
        "database is not kept: back the schema up with pg_dump)", flag=None),
    Key("STORE_LOG", "data_dir", "data_dir", _path, None,
        "identity, stores and stats log; default: the data directory this file is in "
        "(with --config: ~/.local/share/smp-router)", flag=None),
    Key("STORE_LOG", "fsync", "fsync", _choice(FSYNC_POLICIES), "batch",
        "when stored data is forced to disk: never, batch (group commit), always"),
    Key("STORE_LOG", "after_failed_save", "after_failed_save", _bool, False,
        "memory store: on: start although the last run did not finish saving, from the "
        "last complete save (what came after it is lost)", switch=True,
        flag_help="memory store: start although the last run did not finish saving (killed, "
        "or its snapshot failed), from the last complete save; what came after it is lost"),
    Key("STORE_LOG", "skip_corrupt", "skip_corrupt", _bool, False,
        "on: start even if a store log has a corrupt line (it is left out)", switch=True,
        flag_help="start even if a store log has a corrupt line (it is left out)"),
    Key("STORE_LOG", "queue_cache", "queue_cache", parse_count, DEFAULT_QUEUE_CACHE,
        "sqlite store: queue records kept in memory, about 0.6 KB each (1.6 KB with a "
        "notifier and a link; bench/RESULTS.md)"),
    Key("STORE_LOG", "quota", "quota", parse_count, 128,
        "messages per queue before ERR QUOTA"),
    Key("STORE_LOG", "expire_messages_days", "message_ttl", parse_number, DEFAULT_MESSAGE_TTL,
        "days an undelivered message is kept", scale=DAY, flag="--message-ttl",
        flag_help="seconds an undelivered message is kept", flag_parse=parse_number),
    Key("STORE_LOG", "expire_interval", "expire_interval", parse_number, DEFAULT_EXPIRE_INTERVAL,
        "seconds between passes that remove expired messages"),
    Key("STORE_LOG", "expire_on_send", "expire_on_send", _bool, False,
        "on: also remove a queue's expired messages on every SEND to it", switch=True,
        flag_help="also remove a queue's expired messages on every SEND to it"),
    Key("STORE_LOG", "log_stats", "log_stats", _bool, True,
        "off: write no CSV statistics log", flag="--no-stats-log", switch=False,
        flag_help="write no CSV statistics log"),
    Key("STORE_LOG", "stats_log", "stats_log", _path, None,
        "the statistics log; default: stats.csv in the data directory"),
    Key("STORE_LOG", "stats_interval", "stats_interval", parse_stats_interval,
        DEFAULT_STATS_INTERVAL,
        "seconds per statistics line; must divide a day"),
    Key("AUTH", "new_queues", "allow_new_queues", _bool, True,
        "off: every NEW is refused with ERR AUTH", shown=True),
    Key("AUTH", "create_password", "password", _password, None,
        "basic-auth password clients must give to create queues; none if unset",
        flag="--password", flag_help="basic-auth password clients must give to create "
        "queues (other users see it in `ps`: prefer create_password in the file)"),
    Key("AUTH", "control_port_admin_password", "control_admin_password", _text, None,
        "control port password for every command", flag=None),
    Key("AUTH", "control_port_user_password", "control_user_password", _text, None,
        "control port password for the read-only commands", flag=None),
    Key("TRANSPORT", "host", "host", _text, "127.0.0.1",
        "interface to listen on (0.0.0.0: every IPv4 interface)", shown=True),
    Key("TRANSPORT", "port", "port", parse_port_number, 5224, "port to listen on", shown=True),
    Key("TRANSPORT", "public_host", "public_host", _text, None,
        "host name clients use, printed in the smp:// address; default: host, or this "
        "machine's name if host is 0.0.0.0 or ::"),
    Key("TRANSPORT", "delivery", "delivery", _choice(DELIVERY_MODES), "single-task",
        "delivery design: single-task or per-queue-task"),
    Key("TRANSPORT", "send_queue_size", "send_queue_size", parse_count, 64,
        "response batches buffered per connection"),
    Key("TRANSPORT", "stalled_writer_timeout", "stalled_writer_timeout", parse_number, 30.0,
        "seconds a client may take to read one block before it is dropped"),
    Key("TRANSPORT", "end_batch_interval", "end_batch_interval", parse_number, 0.1,
        "seconds between flushes of END/DELD events"),
    Key("TRANSPORT", "handshake_timeout", "handshake_timeout", parse_number, 120.0,
        "seconds a client has to complete the handshake"),
    Key("TRANSPORT", "control_port", "control_port", _port, None,
        "control commands on 127.0.0.1 at this port; off if unset"),
    Key("TRANSPORT", "metrics_port", "metrics_port", _port, None,
        "Prometheus metrics at http://metrics_host:metrics_port/metrics; off if unset"),
    Key("TRANSPORT", "metrics_host", "metrics_host", _text, "127.0.0.1",
        "interface the metrics are served on"),
    Key("TRANSPORT", "tls_cert", "tls_cert", _path, None,
        "PEM certificate chain: the router speaks wss:// (with tls_key)"),
    Key("TRANSPORT", "tls_key", "tls_key", _path, None, "the certificate's private key"),
    Key("TRANSPORT", "drain_period", "drain_period", parse_number, DEFAULT_DRAIN_PERIOD,
        "seconds over which a drain (SIGUSR2, the control port's drain) closes the "
        "connected clients before the router stops"),
    Key("TRANSPORT", "workers", "workers", parse_workers, AUTO_WORKERS,
        "worker processes serving the address, each with its share of the queues; auto: "
        "the usable cores from 3 on (at most 16), else 1 (docs/workers.md)"),
    *(Key("TRANSPORT", bound.name, bound.name,
          parse_number if bound.kind is float else parse_count,
          bound.default, bound.help) for bound in CONFIGURABLE_BOUNDS),
    Key("LIMITS", "new_queues_per_second", "new_queue_rate", _optional_number,
        DEFAULT_NEW_QUEUE_RATE,
        "NEW commands one connection may send per second, after its burst; off: no limit"),
    Key("LIMITS", "new_queues_burst", "new_queue_burst", parse_count, DEFAULT_NEW_QUEUE_BURST,
        "NEW commands one connection may send at once"),
    Key("LIMITS", "new_queues_per_second_per_address", "new_queue_address_rate",
        _optional_number, DEFAULT_NEW_QUEUE_ADDRESS_RATE,
        "NEW commands one client address (IPv6: its /64) may send per second, after its "
        "burst; off: no limit"),
    Key("LIMITS", "new_queues_burst_per_address", "new_queue_address_burst", _whole,
        DEFAULT_NEW_QUEUE_ADDRESS_BURST, "NEW commands one client address may send at once"),
    Key("LIMITS", "new_queues_per_second_total", "new_queue_total_rate", _optional_number,
        DEFAULT_NEW_QUEUE_TOTAL_RATE,
        "NEW commands the router takes per second from all clients, after its burst; off: "
        "no limit"),
    Key("LIMITS", "new_queues_burst_total", "new_queue_total_burst", _whole,
        DEFAULT_NEW_QUEUE_TOTAL_BURST, "NEW commands the router takes at once"),
    Key("LIMITS", "control_login_delay", "control_login_delay", _non_negative,
        DEFAULT_CONTROL_LOGIN_DELAY,
        "seconds a wrong control port password is answered after, times the wrong "
        "passwords its address gave so far (at most 10 s)"),
    Key("LIMITS", "control_lockout_after", "control_lockout_after", _whole,
        DEFAULT_CONTROL_LOCKOUT_AFTER,
        "wrong control port passwords after which their address is locked out for 15 "
        "minutes"),
    Key("LIMITS", "control_max_sessions", "control_max_sessions", _whole,
        DEFAULT_CONTROL_MAX_SESSIONS, "control port sessions open at once"),
    Key("LIMITS", "metrics_max_connections", "metrics_max_connections", _whole,
        DEFAULT_METRICS_MAX_CONNECTIONS, "metrics port connections open at once"),
    Key("LIMITS", "memory_store_max_bytes", "memory_store_max_bytes", _size,
        DEFAULT_MEMORY_STORE_MAX_BYTES,
        "message bytes the memory store holds at most (e.g. 512M, 2G); off: no cap"),
    Key("PROXY", "enable", "allow_proxy", _bool, True,
        "off: refuse to forward for clients (PRXY is answered ERR PROXY BASIC_AUTH)",
        flag="--no-proxy", switch=False,
        flag_help="refuse to forward for clients (private message routing)"),
    Key("PROXY", "password", "proxy_password", _password, None,
        "basic-auth password PRXY must carry; default: create_password, if set (as the "
        "reference router asks)", flag=None),
    Key("PROXY", "max_connections", "proxy_max_connections", parse_count,
        DEFAULT_PROXY_MAX_CONNECTIONS,
        "connections to destination routers at once (one per destination)",
        flag="--proxy-max-connections"),
    Key("PROXY", "connect_timeout", "proxy_connect_timeout", parse_number,
        DEFAULT_PROXY_CONNECT_TIMEOUT,
        "seconds to connect to a destination router (TCP, TLS and the SMP handshake)",
        flag="--proxy-connect-timeout"),
    Key("PROXY", "answer_timeout", "proxy_answer_timeout", parse_number,
        DEFAULT_PROXY_ANSWER_TIMEOUT,
        "seconds a destination router has to answer a forwarded command",
        flag="--proxy-answer-timeout"),
    Key("PROXY", "idle_timeout", "proxy_idle_timeout", parse_number,
        DEFAULT_PROXY_IDLE_TIMEOUT,
        "seconds an unused connection to a destination router stays open",
        flag="--proxy-idle-timeout"),
    Key("PROXY", "error_hold", "proxy_error_hold", _non_negative, DEFAULT_PROXY_ERROR_HOLD,
        "seconds a failed connection attempt's error is given without trying again",
        flag="--proxy-error-hold"),
    Key("PROXY", "client_concurrency", "proxy_client_concurrency", parse_count,
        DEFAULT_PROXY_CLIENT_CONCURRENCY,
        "proxied commands one client connection may have waiting for a destination",
        flag="--proxy-client-concurrency"),
    Key("PROXY", "connects_per_address", "proxy_connects_per_address", parse_count,
        DEFAULT_PROXY_CONNECTS_PER_ADDRESS,
        "destination routers being connected at once for one client address (IPv6: its "
        "/64); its further PRXYs wait", flag="--proxy-connects-per-address"),
    Key("PROXY", "max_connections_per_address", "proxy_max_connections_per_address",
        parse_count, DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS,
        "connections to destination routers one client address may hold (those being "
        "connected and those it opened); well below max_connections",
        flag="--proxy-max-connections-per-address"),
    Key("PROXY", "allow_destinations", "proxy_allow_destinations", _networks, None,
        "networks the proxy may connect to although loopback, private, link-local or this "
        "machine's (refused by default), e.g. 10.0.0.0/8, fd00::/8; comma-separated",
        flag="--proxy-allow-destinations"),
    Key("PROXY", "own_server_domains", "proxy_own_domains", _domains, None,
        "host names (and names under them) of the operator's own routers, counted apart "
        "in the proxy statistics; comma-separated", flag="--proxy-own-domains"),
    Key("INACTIVE_CLIENTS", "disconnect", "inactive_disconnect", _bool, False,
        "on: disconnect clients without subscriptions that sent nothing for ttl seconds "
        "(the --idle-timeout flag sets the same)", flag=None),
    Key("INACTIVE_CLIENTS", "ttl", "inactive_ttl", parse_number, 21600.0,
        "seconds of silence before such a client is disconnected", flag=None),
    Key("LOG", "level", "log_level", _choice(LOG_LEVELS), "info",
        "debug, info, warning or error", flag="--log-level"),
    Key("LOG", "file", "log_file", _path, None,
        "append the log to this file instead of stderr", flag="--log-file"),
)

# [TRANSPORT] keys of the listener that are RouterConfig fields of that name.
LISTENER_SETTINGS = ("tls_cert", "tls_key", *(bound.name for bound in CONFIGURABLE_BOUNDS))

# Shown on the server information page, in this order (the reference's names).
INFORMATION_KEYS = (
    "source_code", "usage_conditions", "condition_amendments", "server_country",
    "operator", "operator_country", "website", "admin_simplex", "admin_email",
    "complaints_simplex", "complaints_email", "hosting", "hosting_country", "description",
)
KEYS += tuple(
    Key("INFORMATION", name, f"info_{name}", _text, None, f"{name.replace('_', ' ')}",
        flag=None)
    for name in INFORMATION_KEYS
)
_BY_KEY = {(k.section, k.name): k for k in KEYS}
SECTIONS = tuple(dict.fromkeys(k.section for k in KEYS))
DEFAULTS: Mapping[str, object] = {k.setting: k.default for k in KEYS}


def read_config_file(path: Path) -> dict[str, object]:
    """The settings a configuration file sets (only those it sets)."""
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ConfigFileError(f"{path}: is a directory, not a configuration file") from None
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such configuration file") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise ConfigFileError(f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x})"
                              ) from None
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read: {e.strerror or e}") from e
    settings = parse_config_text(text, str(path))
    # A relative path in the file is relative to the file, not to the working directory.
    return {name: path.parent / value if isinstance(value, Path) and not value.is_absolute()
            else value for name, value in settings.items()}


def parse_config_text(text: str, filename: str) -> dict[str, object]:
    parser = configparser.ConfigParser(
        interpolation=None, delimiters=("=", ":"), comment_prefixes=("#", ";"),
        inline_comment_prefixes=None, empty_lines_in_values=False, default_section="\0",
    )
    try:
        parser.read_string(text, source=filename)
    except configparser.Error as e:
        raise ConfigFileError(_parser_error(e, filename)) from None
    lines = _key_lines(text)
    settings: dict[str, object] = {}
    for section in parser.sections():
        for name, value in parser.items(section):
            line = lines.get((section, name), 0)
            settings.update(_setting(section, name, value.strip(), f"{filename}:{line}"))
    return settings


def _setting(section: str, name: str, value: str, where: str) -> dict[str, object]:
    if section not in SECTIONS:
        raise ConfigFileError(
            f"{where}: [{section}] {name}: unknown section (known: {', '.join(SECTIONS)})"
        )
    key = _BY_KEY.get((section, name))
    if key is None:
        known = ", ".join(k.name for k in KEYS if k.section == section)
        raise ConfigFileError(f"{where}: [{section}] {name}: unknown key (known: {known})")
    try:
        parsed = key.parse(value)
    except ValueError as e:
        reason = str(e) or f"not a valid value: {value!r}"
        raise ConfigFileError(f"{where}: [{section}] {name}: {reason}") from None
    if key.scale != 1.0 and isinstance(parsed, int | float):
        parsed = parsed * key.scale
    return {key.setting: parsed}


def _key_lines(text: str) -> dict[tuple[str, str], int]:
    """(section, lower-cased key) -> line number, for error messages."""
    lines: dict[tuple[str, str], int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        if header := _SECTION_LINE.match(line):
            section = header[1].strip()
        elif (key := _KEY_LINE.match(line)) and not line[:1].isspace():
            lines.setdefault((section, key[1].strip().lower()), number)
    return lines


def _parser_error(e: configparser.Error, filename: str) -> str:
    if isinstance(e, configparser.DuplicateOptionError):
        return f"{filename}:{e.lineno}: [{e.section}] {e.option}: set twice"
    if isinstance(e, configparser.DuplicateSectionError):
        return f"{filename}:{e.lineno}: [{e.section}]: section appears twice"
    if isinstance(e, configparser.MissingSectionHeaderError):
        return f"{filename}:{e.lineno}: a setting before any [SECTION] header: {e.line.strip()!r}"
    if isinstance(e, configparser.ParsingError) and e.errors:
        lineno, line = e.errors[0]
        if line[:1] in ("'", '"'):  # configparser keeps the line as its repr
            line = ast.literal_eval(line)
        return f"{filename}:{lineno}: not a `key = value` line: {line.strip()!r}"
    return f"{filename}: {e.message}"  # pragma: no cover - every error above has a line


def display(key: Key, value: object) -> str:
    """A setting as it would be written in the file."""
    if value is None:
        return ""
    if key.parse is _database_store:
        return "database"
    if isinstance(value, bool):
        return "on" if value else "off"
    if key.parse is _size and isinstance(value, int):
        return size_text(value)
    if key.scale != 1.0 and isinstance(value, int | float):
        value = value / key.scale
    if isinstance(value, float):
        return plain_number(value)
    if isinstance(value, tuple):  # a list of names
        return ", ".join(value)
    return str(value)


def render_config(settings: Mapping[str, object], *, secret: Iterable[str] = ()) -> str:
    """Every key with its effective value, section by section (for `config check`)."""
    hidden = set(secret)
    out: list[str] = []
    for section in SECTIONS:
        out.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            value = display(key, settings.get(key.setting, key.default))
            if key.setting in hidden and value:
                value = "(set)"
            out.append(f"{key.name}: {value}".rstrip())
        out.append("")
    return "\n".join(out)


def template(settings: Mapping[str, object] | None = None) -> str:
    """The commented file `smp-router init` writes: every key with its doc line;
    the `shown` ones set, the others commented out at their default."""
    settings = settings or {}
    out = [
        "# smp-router configuration. `key: value` or `key = value`; a line starting",
        "# with # or ; is a comment. Command-line flags override what is set here.",
        "# `smp-router config check` prints the configuration in effect.",
        "",
    ]
    for section in SECTIONS:
        out.append(f"[{section}]")
        for key in (k for k in KEYS if k.section == section):
            value = display(key, settings.get(key.setting, key.default))
            out.append(f"# {key.doc}")
            prefix = "" if key.shown or key.setting in settings else "# "
            out.append(f"{prefix}{key.name}: {value}".rstrip())
        out.append("")
    return "\n".join(out)
