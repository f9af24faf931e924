"""A private PostgreSQL: `initdb` and `pg_ctl` in a temporary directory, on 127.0.0.1.

For the benchmarks beside the other stores, and for the tests (tests/postgres_server.py).
Debian's `postgresql` package provides the binaries. `initdb` and `postgres` refuse
to run as root, so as root they run as the `postgres` user that package creates.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
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

    def halt(self) -> None:
        """Stop the database (`fast`: its clients' connections dropped, no crash
        recovery to wait for after), keeping its data: `start` brings it back."""
        self._pg_ctl("stop", "-m", "fast")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def schema_for(path: Path | str) -> str:
    """A schema name that belongs to a path (a data directory): the same path, the same
    schema."""
    return "t_" + hashlib.sha256(str(path).encode()).hexdigest()[:24]
