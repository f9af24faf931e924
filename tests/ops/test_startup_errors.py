"""Every start-up failure outside the router: one line naming the address or path, exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from worker_count import one_process

from store.sqlite.database import DB_FILE

SMP_ROUTER = Path(sys.executable).with_name("smp-router")


def run(*args: str) -> tuple[int, str]:
    command = [str(SMP_ROUTER)] if SMP_ROUTER.exists() else [sys.executable, "-m", "router.server"]
    result = subprocess.run([*command, *one_process(args), "--log-level", "error"],
                            capture_output=True, text=True, timeout=30)
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return result.returncode, lines[0]


@pytest.fixture
def taken_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_the_router_port_in_use_names_host_and_port(taken_port):
    code, line = run("serve", "--store", "memory", "--port", str(taken_port))
    assert code == 2
    assert line == (f"smp-router: error: cannot listen on 127.0.0.1:{taken_port} for the "
                    "router: Address already in use")


def test_the_metrics_port_in_use_is_named(taken_port):
    code, line = run("serve", "--store", "memory", "--port", "0",
                     "--metrics-port", str(taken_port))
    assert code == 2 and f"127.0.0.1:{taken_port} for metrics" in line


def test_the_control_port_in_use_is_named(tmp_path, taken_port):
    config = tmp_path / "c.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = pw\n"
                      f"[TRANSPORT]\ncontrol_port = {taken_port}\nport = 0\n"
                      f"[STORE_LOG]\nstore = memory\ndata_dir = {tmp_path / 'd'}\n")
    code, line = run("serve", "--config", str(config))
    assert code == 2 and f"127.0.0.1:{taken_port} for the control port" in line


def test_an_unknown_host_is_named():
    code, line = run("serve", "--store", "memory", "--port", "0",
                     "--host", "no-such-host.invalid")
    assert code == 2
    assert "no-such-host.invalid:0" in line and "unknown host" in line


def test_an_address_not_on_this_machine_is_named():
    code, line = run("serve", "--store", "memory", "--port", "0", "--host", "192.0.2.1")
    assert code == 2 and "192.0.2.1:0" in line and "assign" in line


@pytest.mark.parametrize("store", [None, "sqlite", "memory", "journal"])
def test_a_data_directory_that_is_a_file_is_named(tmp_path, store):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    args = ["serve", "--port", "0", "--data-dir", str(not_a_dir)]
    code, line = run(*args, *(["--store", store] if store else []))
    assert code == 2 and line == f"smp-router: error: data directory {not_a_dir} is not a directory"


def test_init_on_a_file_is_named(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    code, line = run("init", "--data-dir", str(not_a_dir))
    assert code == 2 and str(not_a_dir) in line


def test_a_sqlite_database_that_cannot_be_opened_is_named(tmp_path):
    database = tmp_path / "d" / "sqlite-store" / DB_FILE
    database.mkdir(parents=True)  # a directory where the database file should be
    code, line = run("serve", "--port", "0", "--store", "sqlite", "--data-dir",
                     str(tmp_path / "d"))
    assert code == 2 and str(database) in line


def test_a_log_file_that_cannot_be_opened_is_named(tmp_path):
    log_file = tmp_path / "missing" / "router.log"
    code, line = run("serve", "--store", "memory", "--port", "0", "--log-file", str(log_file))
    assert code == 2 and str(log_file) in line
