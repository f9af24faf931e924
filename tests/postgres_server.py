"""The test run's private PostgreSQL (bench/postgres_server.py: `initdb` and `pg_ctl` in a
temporary directory), started on first use and stopped by tests/conftest.py. Each test
takes a schema of its own (`schema_for` its path), so the tests share one server and
never each other's tables.
"""

from __future__ import annotations

from pathlib import Path

from bench.postgres_server import PostgresServer, schema_for

__all__ = ["PostgresServer", "postgres_store_options", "router_store_settings", "schema_for",
           "shared_server", "stop_shared_server"]

_server: PostgresServer | None = None


def shared_server() -> PostgresServer:
    """The server of this test run, started on first use (tests/conftest.py stops it)."""
    global _server
    if _server is None:
        server = PostgresServer()
        server.start()
        _server = server
    return _server


def stop_shared_server() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None


def postgres_store_options(data_dir: Path | str) -> dict[str, object]:
    """`RouterConfig.store_options` of a postgres-store router on `data_dir`: the test
    run's server, and the schema that belongs to that directory (a restarted router on
    the same directory finds its data)."""
    return {"db_connection": shared_server().url, "db_schema": schema_for(data_dir),
            "db_pool_size": 4}


def router_store_settings(kind: str, data_dir: Path | str | None) -> dict[str, object]:
    """The RouterConfig settings that choose store `kind` on `data_dir`."""
    settings: dict[str, object] = {"store": kind}
    if kind != "memory":
        settings["data_dir"] = data_dir
    if kind == "postgres":
        assert data_dir is not None
        settings["store_options"] = postgres_store_options(data_dir)
    return settings
