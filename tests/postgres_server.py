"""A private PostgreSQL for the tests: `initdb` and `pg_ctl` in a temporary directory.

Debian's `postgresql` package (scripts/install-test-deps.sh) provides the
binaries. `initdb` and `postgres` refuse to run as root, so as root (CI) they
run as the `postgres` user that package creates. Each test takes a fresh
schema (`fresh_schema`), so the tests share one server and never each other's
tables.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

DATABASE = "smp"
PG_USER = "postgres"


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's binaries directory; a clear failure if none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin): run "
            "scripts/install-test-deps.sh as root (apt-get install postgresql)"
        )
    return Path(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1 at a free port, in its own directory."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="smp-pg-"))
        self.data = self.dir / "data"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.dir, PG_USER)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", PG_USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)

    @property
    def url(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", PG_USER, "-E", "UTF8")
        self._pg_ctl("start")
        created = self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER,
                            DATABASE, check=False)
        if created.returncode != 0 and "already exists" not in created.stderr:
            raise RuntimeError(f"createdb failed: {created.stderr.strip()}")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=200 -c fsync=on")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w",
                  "-o", options, *extra, action)

    def restart(self, mode: str = "immediate") -> None:
        """A crash of the database (`immediate`) or a clean restart (`fast`)."""
        self._pg_ctl("restart", "-m", mode)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def fresh_schema(self) -> str:
        return f"t_{uuid.uuid4().hex[:20]}"


def schema_for(path: Path | str) -> str:
    """A schema name that belongs to a test's path: the same path, the same schema."""
    return "t_" + hashlib.sha256(str(path).encode()).hexdigest()[:24]


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
