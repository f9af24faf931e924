"""Router configuration: one frozen record, checked when it is made.

Everything an operator can set lives here, with the reference router's
defaults where the protocol has one (docs/protocol.md#limits). A bad value raises
`ConfigError` with a message fit to show the operator as one line.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from dataclasses import dataclass, field
from pathlib import Path

from store.durability import FsyncPolicy
from store.sqlite.queues import DEFAULT_CACHE_SIZE

from .edge_limits import CONFIGURABLE_BOUNDS, EdgeLimits, EdgeSettings

SINGLE_TASK = "single-task"
PER_QUEUE_TASK = "per-queue-task"
DELIVERY_MODES = (SINGLE_TASK, PER_QUEUE_TASK)
STORE_KINDS = ("memory", "journal", "sqlite", "postgres")
FSYNC_POLICIES = tuple(policy.value for policy in FsyncPolicy)  # never, batch, always
DEFAULT_MESSAGE_TTL = 21 * 24 * 3600  # seconds (docs/protocol.md#limits)
DEFAULT_EXPIRE_INTERVAL = 2 * 3600  # seconds between expiration passes (docs/protocol.md#limits)
DEFAULT_STATS_INTERVAL = 3600  # seconds per stats log line
# What `smp-router serve` limits by default. One connection may create this many
# queues at once, then this many per second: a client joining many groups is not
# slowed, one creating queues in a loop is.
DEFAULT_NEW_QUEUE_RATE = 10.0
DEFAULT_NEW_QUEUE_BURST = 100
# The same for one client address (a few users behind one NAT may each create
# their queues at once) and for the router as a whole (8.6 million queues a day).
DEFAULT_NEW_QUEUE_ADDRESS_RATE = 20.0
DEFAULT_NEW_QUEUE_ADDRESS_BURST = 200
DEFAULT_NEW_QUEUE_TOTAL_RATE = 100.0
DEFAULT_NEW_QUEUE_TOTAL_BURST = 1000
# The operation ports (README "Control port", "Metrics").
DEFAULT_CONTROL_LOGIN_DELAY = 0.5
DEFAULT_CONTROL_LOCKOUT_AFTER = 10
DEFAULT_CONTROL_MAX_SESSIONS = 16
DEFAULT_METRICS_MAX_CONNECTIONS = 8
DEFAULT_QUEUE_CACHE = DEFAULT_CACHE_SIZE  # queue records the sqlite store keeps in memory
DEFAULT_MEMORY_STORE_MAX_BYTES = 1 << 30  # message bodies the memory store holds at most
DEFAULT_DRAIN_PERIOD = 30.0  # seconds over which a drain closes the connected clients
# The proxy (docs/protocol.md#private-message-routing): its connections to destination
# routers and the proxied commands it works on for one client at a time (the reference's
# client_concurrency).
DEFAULT_PROXY_MAX_CONNECTIONS = 1000
DEFAULT_PROXY_CONNECT_TIMEOUT = 20.0
DEFAULT_PROXY_ANSWER_TIMEOUT = 15.0
DEFAULT_PROXY_IDLE_TIMEOUT = 600.0
DEFAULT_PROXY_ERROR_HOLD = 30.0  # the reference's persistErrorInterval
DEFAULT_PROXY_CLIENT_CONCURRENCY = 32
# One client address's share of the proxy's pool (core/relays.py): destinations being
# connected for it, and those with the connections it opened, well below the pool.
DEFAULT_PROXY_CONNECTS_PER_ADDRESS = 16
DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS = 100

WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# Basic-auth passwords: printable, no space, '@', ':' or '/' (docs/protocol.md#command-table).
_PASSWORD_FORBIDDEN = frozenset(" @:/")


class ConfigError(ValueError):
    """A configuration value the router cannot run with."""


@dataclass(frozen=True, slots=True)
class RouterConfig(EdgeSettings):  # type: ignore[misc, valid-type]
    """Every setting; the listener's limits come from the table in edge_limits.py."""

    host: str = "127.0.0.1"
    port: int = 5224  # 0 picks a free port
    store: str = "memory"  # memory | journal | sqlite | postgres
    data_dir: Path | None = None  # identity and durable stores; None: nothing kept
    delivery: str = SINGLE_TASK  # or PER_QUEUE_TASK, the design it replaces
    quota: int = 128  # messages per queue before QUOTA (msgQueueQuota)
    password: bytes | None = None  # basic auth required by NEW, if set
    allow_new_queues: bool = True  # False: every NEW is refused with AUTH
    send_queue_size: int = 64  # batches waiting for a connection's writer
    stalled_writer_timeout: float = 30.0  # drop a peer that takes longer to accept one block
    end_batch_interval: float = 0.1  # how often pending END/DELD events are flushed
    ntf_batch_interval: float = 0.05  # how long NMSGs gather before a batch is sent
    # client hello deadline (docs/protocol.md#handshake-client-hello)
    handshake_timeout: float = 120.0
    close_timeout: float = 2.0  # WebSocket closing handshake deadline
    fsync: FsyncPolicy = FsyncPolicy.BATCH  # when durable stores force data to disk
    message_ttl: float = DEFAULT_MESSAGE_TTL  # messages older than this are removed
    expire_interval: float = DEFAULT_EXPIRE_INTERVAL  # how often expiration runs
    expire_on_send: bool = False  # also expire a queue's old messages on every SEND to it
    stats_log: Path | None = None  # CSV statistics log (docs/stats-log.md); None: not written
    stats_interval: int = DEFAULT_STATS_INTERVAL  # seconds per line; divides a day
    idle_timeout: float | None = None  # drop clients without subscriptions idle this long
    drain_period: float = DEFAULT_DRAIN_PERIOD  # a drain closes the clients over this
    workers: int = 1  # processes serving the one address (docs/workers.md)
    workers_auto: bool = False  # `workers` came from `auto` (settings/workers.py)
    tls_cert: Path | None = None  # PEM certificate chain: the listener speaks wss://
    tls_key: Path | None = None  # its private key (both or neither)
    store_options: dict[str, object] = field(default_factory=dict, hash=False, compare=False)
    # --- operation (docs: README "Operating the router") ---
    public_host: str | None = None  # host name in the printed smp:// address
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # Prometheus /metrics; None: not served
    control_port: int | None = None  # control commands on 127.0.0.1; None: not served
    control_admin_password: str | None = None
    control_user_password: str | None = None
    control_login_delay: float = DEFAULT_CONTROL_LOGIN_DELAY  # seconds per wrong password so far
    control_lockout_after: int = DEFAULT_CONTROL_LOCKOUT_AFTER  # wrong passwords per address
    control_max_sessions: int = DEFAULT_CONTROL_MAX_SESSIONS  # control sessions open at once
    metrics_max_connections: int = DEFAULT_METRICS_MAX_CONNECTIONS  # scrapes served at once
    # Limits (limits.py). Off here, for embedding programs, tests and benchmarks;
    # `smp-router serve` sets the DEFAULT_* values unless its configuration says otherwise.
    new_queue_rate: float | None = None  # NEW per second per connection after the burst
    new_queue_burst: int = DEFAULT_NEW_QUEUE_BURST  # NEWs a connection may make at once
    new_queue_address_rate: float | None = None  # the same per client address (IPv6: /64)
    new_queue_address_burst: int = DEFAULT_NEW_QUEUE_ADDRESS_BURST
    new_queue_total_rate: float | None = None  # the same for the whole router
    new_queue_total_burst: int = DEFAULT_NEW_QUEUE_TOTAL_BURST
    memory_store_max_bytes: int | None = None  # message body bytes the memory store holds
    information: tuple[tuple[str, str], ...] = ()  # [INFORMATION] fields for the info page
    # --- proxying (docs/protocol.md#private-message-routing; README "Private routing") ---
    # Off here, for embedding programs and tests; `smp-router serve` turns it on.
    allow_proxy: bool = False
    # The basic auth PRXY must carry; None: the create password (`password`) if set, as
    # the reference asks for its newQueueBasicAuth.
    proxy_password: bytes | None = None
    proxy_max_connections: int = DEFAULT_PROXY_MAX_CONNECTIONS  # destinations at once
    proxy_connect_timeout: float = DEFAULT_PROXY_CONNECT_TIMEOUT  # TCP, TLS and handshake
    proxy_answer_timeout: float = DEFAULT_PROXY_ANSWER_TIMEOUT  # a forwarded command's answer
    proxy_idle_timeout: float = DEFAULT_PROXY_IDLE_TIMEOUT  # an unused connection is closed
    proxy_error_hold: float = DEFAULT_PROXY_ERROR_HOLD  # a failed connect is not retried so soon
    proxy_client_concurrency: int = DEFAULT_PROXY_CLIENT_CONCURRENCY  # per client connection
    proxy_own_domains: tuple[str, ...] = ()  # destinations counted as "own" in the statistics
    proxy_connects_per_address: int = DEFAULT_PROXY_CONNECTS_PER_ADDRESS
    proxy_max_connections_per_address: int = DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS
    # Networks the proxy may connect to although they are loopback, private, link-local
    # or this machine's (core/proxy_destinations.py): none by default, here too.
    proxy_allow_destinations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.data_dir, str):
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if isinstance(self.stats_log, str):
            object.__setattr__(self, "stats_log", Path(self.stats_log))
        for name in ("tls_cert", "tls_key"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Path(getattr(self, name)))
        for name in ("password", "proxy_password"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).encode())
        _check_choice("store", self.store, STORE_KINDS)
        _check_choice("delivery", self.delivery, DELIVERY_MODES)
        _check_choice("fsync", self.fsync, FSYNC_POLICIES)
        object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, not {self.port}")
        if not self.host:
            raise ConfigError("host must not be empty")
        if self.quota < 1:
            raise ConfigError(f"quota must be at least 1, not {self.quota}")
        if self.send_queue_size < 1:
            raise ConfigError(f"send queue size must be at least 1, not {self.send_queue_size}")
        for name in ("stalled_writer_timeout", "end_batch_interval", "ntf_batch_interval",
                     "handshake_timeout", "close_timeout", "message_ttl", "expire_interval"):
            _check_duration(name, getattr(self, name))
        if self.idle_timeout is not None:
            _check_duration("idle_timeout", self.idle_timeout)
        _check_duration("drain_period", self.drain_period)
        for bound in CONFIGURABLE_BOUNDS:
            check = _check_duration if bound.kind is float else _check_count
            check(bound.name, getattr(self, bound.name))
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both a certificate and a key file")
        for secret in (self.password, self.proxy_password):
            if secret is not None:
                check_password(secret)
        if not isinstance(self.stats_interval, int) or self.stats_interval < 1 or (
            86400 % self.stats_interval
        ):
            raise ConfigError("stats interval must be a whole number of seconds dividing a day")
        if self.store != "memory" and self.data_dir is None:
            raise ConfigError(f"the {self.store} store needs a data directory")
        if self.data_dir is not None and self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data directory {self.data_dir} is not a directory")
        self._check_operation()

    def _check_operation(self) -> None:
        for name in ("metrics_port", "control_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ConfigError(f"{name.replace('_', ' ')} must be 0..65535, not {value}")
        if self.public_host is not None and not self.public_host.strip():
            raise ConfigError("public host must not be empty")
        if self.control_port is not None and not (
            self.control_admin_password or self.control_user_password
        ):
            raise ConfigError("the control port needs an admin or a user password")
        for scale in ("", "address_", "total_"):
            rate, burst = f"new_queue_{scale}rate", f"new_queue_{scale}burst"
            if getattr(self, rate) is not None:
                _check_duration(rate, getattr(self, rate))
            if getattr(self, burst) < 1:
                raise ConfigError(f"{burst.replace('_', ' ')} must be at least 1, "
                                  f"not {getattr(self, burst)}")
        _check_duration("control_login_delay", self.control_login_delay)
        for name in ("control_lockout_after", "control_max_sessions",
                     "metrics_max_connections"):
            _check_count(name, getattr(self, name))
        if self.memory_store_max_bytes is not None and self.memory_store_max_bytes < 1:
            raise ConfigError("memory store max bytes must be at least 1")
        self._check_proxy()

    def _check_proxy(self) -> None:
        for name in ("proxy_connect_timeout", "proxy_answer_timeout", "proxy_idle_timeout"):
            _check_duration(name, getattr(self, name))
        error_hold = self.proxy_error_hold
        if not (isinstance(error_hold, int | float) and error_hold >= 0
                and math.isfinite(error_hold)):
            raise ConfigError("proxy error hold must be a number, at least 0")
        for name in ("proxy_max_connections", "proxy_client_concurrency",
                     "proxy_connects_per_address", "proxy_max_connections_per_address"):
            _check_count(name, getattr(self, name))
        if isinstance(self.proxy_own_domains, str):
            raise ConfigError("proxy own domains must be a list of names")
        if isinstance(self.proxy_allow_destinations, str):
            raise ConfigError("proxy allow destinations must be a list of networks")
        for entry in self.proxy_allow_destinations:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(f"proxy allow destinations: {entry!r} is not an IP network "
                                  "or address") from None

    def edge_limits(self) -> EdgeLimits:
        return EdgeLimits(  # type: ignore[no-any-return]
            **{bound.name: getattr(self, bound.name) for bound in CONFIGURABLE_BOUNDS},
            stalled_timeout=self.stalled_writer_timeout, close_timeout=self.close_timeout,
        )

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to: the public host, else the listening
        host unless it is a wildcard (0.0.0.0, ::), else this machine's name."""
        if self.public_host:
            return self.public_host
        if self.host in WILDCARD_HOSTS:
            return socket.getfqdn()
        return self.host


def check_password(password: bytes) -> None:
    """The basic-auth rules of docs/protocol.md#command-table, so that clients can actually send
    it."""
    if not 1 <= len(password) <= 255:
        raise ConfigError("password must be 1..255 bytes")
    text = password.decode("latin-1")
    if any(not c.isprintable() or c in _PASSWORD_FORBIDDEN for c in text):
        raise ConfigError("password must be printable, without space, '@', ':' or '/'")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def _check_count(name: str, value: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(f"{name.replace('_', ' ')} must be a whole number, at least 1")


def _check_duration(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name.replace('_', ' ')} must be a positive number")


class StartupError(Exception):
    """The router could not start for a reason outside it (an address in use, an unknown
    host, a file it cannot open); the message names the address or path concerned."""


def os_error_reason(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror or exc})"
    return exc.strerror or str(exc)


def find_os_error(exc: BaseException) -> OSError | None:
    """The OSError inside `exc` (trio may wrap it in exception groups), if any."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_os_error(inner)
            if found is not None:
                return found
    return None
