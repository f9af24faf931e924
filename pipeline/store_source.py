"""`stats --db`: which database a router's store is in, and how Spark's JDBC source
reaches it. Pure: no Spark, no connection (checked before a JVM starts).

The operator gives the URL the router was given (`db_connection`, a libpq
`postgresql://` URL) and, when it is not the default, the router's `db_schema`
as the `schema` parameter; a `ROUTER=` prefix names the router as its stats log
is named, so that the store figures and the stats tables of one router line up:

    smp-pipeline stats logs/ --out report/ --db eu-1=postgresql://smp@db1:5432/smp_server_store

PostgreSQL's JDBC driver connects over TCP only: a URL without a host reaches
`localhost` (libpq would use the Unix socket there, so the role may need a
password over TCP: in the URL, `PGPASSWORD` or `~/.pgpass`).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from .checks import CONNECT_TIMEOUT, EnvironmentProblem, UsageError

DEFAULT_SCHEMA = "smp_server"  # the router's db_schema default (store/postgres/database.py)
DEFAULT_PORT = 5432
DRIVER_CLASS = "org.postgresql.Driver"
# Debian's libpostgresql-jdbc-java puts the driver here (scripts/install-test-deps.sh)
DEFAULT_DRIVER_JAR = "/usr/share/java/postgresql.jar"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # as the router accepts db_schema
_ROUTER_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# libpq parameters with the same name and meaning in the JDBC driver
_PASSED_ON = {"sslmode", "sslcert", "sslkey", "sslrootcert", "sslpassword", "connect_timeout",
              "application_name", "options"}
_JDBC_NAME = {"connect_timeout": "connectTimeout", "application_name": "ApplicationName"}


@dataclass(frozen=True, slots=True)
class StoreDatabase:
    """One router's postgres store, as Spark's JDBC source reads it."""

    router: str
    jdbc_url: str  # no user or password in it: those are properties
    host: str
    port: int
    schema: str
    shown: str  # the URL as messages show it: the password masked
    properties: dict[str, str] = field(default_factory=dict, repr=False)

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"


def parse_store_database(text: str) -> StoreDatabase:
    """`[ROUTER=]postgresql://[USER[:PASSWORD]@][HOST][:PORT][/DATABASE][?schema=S&...]`;
    UsageError with one line for anything else."""
    router, sep, url = text.partition("=")
    if not sep or "://" in router:
        router, url = "", text
    elif not _ROUTER_NAME.fullmatch(router):
        raise UsageError(f"--db: router name {router!r} is not letters, digits, '.', '_', '-'")
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise UsageError(f"--db takes a postgresql:// URL, not {_masked(url)!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise UsageError(f"--db: bad port in {_masked(url)}") from None
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = params.pop("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(f"--db: schema {schema!r} is not a schema name the router accepts")
    if "host" in params or "hostaddr" in params or (parts.hostname or "").startswith("/"):
        raise UsageError(
            f"--db {_masked(url)}: the JDBC driver connects over TCP; give the host name "
            "in the URL (postgresql://USER@HOST:PORT/DATABASE)"
        )
    unknown = sorted(set(params) - _PASSED_ON)
    if unknown:
        raise UsageError(f"--db: unknown parameter {unknown[0]!r} in {_masked(url)}")
    user = unquote(parts.username) if parts.username else os.environ.get("PGUSER", "")
    if not user:
        raise UsageError(f"--db {_masked(url)}: no user (postgresql://USER@HOST/DATABASE)")
    database = unquote(parts.path.lstrip("/")) or user  # libpq's default: the user's name
    host = parts.hostname or "localhost"
    properties = {"user": user, "driver": DRIVER_CLASS}
    password = unquote(parts.password) if parts.password else os.environ.get("PGPASSWORD")
    if password:
        properties["password"] = password
    properties.update({_JDBC_NAME.get(k, k): v for k, v in params.items()})
    netloc = f"[{host}]" if ":" in host else host
    return StoreDatabase(
        router=router or database,
        jdbc_url=f"jdbc:postgresql://{netloc}:{port}/{quote(database, safe='')}",
        host=host,
        port=port,
        schema=schema,
        shown=_masked(url),
        properties=properties,
    )


def _masked(url: str) -> str:
    """The URL with its password as `***`, as the router logs it."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def check_driver_jar(path: str) -> None:
    if not Path(path).is_file():
        raise UsageError(
            f"no PostgreSQL JDBC driver at {path}: install Debian's libpostgresql-jdbc-java "
            "(apt-get install libpostgresql-jdbc-java), or give its jar with --jdbc-jar"
        )


def check_reachable(db: StoreDatabase, timeout: float = CONNECT_TIMEOUT) -> None:
    """A TCP connection to the database before Spark tries (and says it in a Java trace)."""
    try:
        socket.create_connection((db.host, db.port), timeout=timeout).close()
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot reach the database {db.shown}: {exc.strerror or exc}"
        ) from None
