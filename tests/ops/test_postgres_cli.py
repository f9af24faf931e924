"""`serve --store postgres` and the reference router's [STORE_LOG] keys: a database that
cannot be reached and a schema another router holds are one line and exit 2; the
file's `store_queues = database` is the postgres store."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import trio
from postgres_server import schema_for, shared_server
from worker_count import one_process

from router.server.cli.main import build_parser
from router.server.cli.settings import config_from_args
from router.server.settings.config import ConfigError

ADDRESS = re.compile(rb"smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:\d+")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "router.server", *one_process(args), "--log-level", "error"]


def one_line_failure(*args: str) -> tuple[int, str]:
    result = subprocess.run(command(*args), capture_output=True, text=True, timeout=60)
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return result.returncode, lines[0]


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        url = f"postgresql://smp:s3cret@127.0.0.1:{port}/smp"
        code, line = one_line_failure("serve", "--port", "0", "--store", "postgres",
                                      "--data-dir", str(tmp_path), "--db-connection", url)
    assert code == 2
    assert line.startswith("smp-router: error: cannot open the postgres store: cannot reach "
                           f"the database postgresql://smp:***@127.0.0.1:{port}/smp")
    assert "s3cret" not in line


async def test_a_second_router_on_the_same_schema_refuses_to_start(tmp_path):
    url, schema = shared_server().url, schema_for(tmp_path)
    flags = ["--port", "0", "--store", "postgres", "--db-connection", url, "--db-schema", schema]
    first = await trio.lowlevel.open_process(
        command("serve", "--data-dir", str(tmp_path / "one"), *flags),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(60):
            line = b""
            while not line.endswith(b"\n"):
                chunk = await first.stdout.receive_some(1)
                assert chunk, f"the first router ended before listening: {line!r}"
                line += chunk
        assert ADDRESS.search(line), line
        # another data directory, the same schema: the database's lock refuses it
        code, refused = await trio.to_thread.run_sync(
            lambda: one_line_failure("serve", "--data-dir", str(tmp_path / "two"), *flags)
        )
        assert code == 2
        assert f"another router uses schema {schema} of {url}" in refused
    finally:
        first.kill()
        with trio.CancelScope(shield=True):
            await first.wait()


def _config(tmp_path: Path, text: str, *flags: str):
    path = tmp_path / "smp-router.ini"
    path.write_text(text)
    return config_from_args(build_parser().parse_args(["serve", "--config", str(path), *flags]))


def test_the_reference_routers_keys_choose_the_postgres_store_and_its_options(tmp_path):
    config = _config(tmp_path, (
        "[STORE_LOG]\n"
        f"data_dir = {tmp_path / 'data'}\n"
        "store_queues = database\nstore_messages = database\n"
        "db_connection = postgresql://smp@db.example/smp\n"
        "db_schema = relay_one\ndb_pool_size = 3\ndb_deleted_ttl = 2\n"
    ))
    assert config.store == "postgres"
    assert config.store_options == {
        "db_connection": "postgresql://smp@db.example/smp", "db_schema": "relay_one",
        "db_pool_size": 3, "db_deleted_ttl": 2 * 86400,
    }
    flagged = _config(tmp_path, "[STORE_LOG]\nstore = postgres\n", "--db-deleted-ttl", "60",
                      "--db-pool-size", "2")
    assert flagged.store_options == {"db_pool_size": 2, "db_deleted_ttl": 60}


def test_store_queues_database_beside_another_store_kind_is_refused(tmp_path):
    try:
        _config(tmp_path, "[STORE_LOG]\nstore = sqlite\nstore_queues = database\n")
    except ConfigError as e:
        assert "contradicts" in str(e)
    else:
        raise AssertionError("a contradiction was accepted")
