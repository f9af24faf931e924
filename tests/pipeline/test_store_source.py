"""`stats --db`: the database URL as the JDBC source takes it, the key ranges a large table
is read in, and the command line's refusals (one line; exit 2 for a bad URL or a missing
driver, 1 for a database that cannot be reached), all before Spark starts."""

from __future__ import annotations

import re
import socket
from datetime import date
from pathlib import Path

import pytest

from pipeline.charts import store_totals, write_store_chart
from pipeline.checks import UsageError
from pipeline.cli import main
from pipeline.store_job import byte_ranges, partitions_for
from pipeline.store_source import parse_store_database


def test_a_router_url_becomes_a_jdbc_url_with_its_user_password_and_schema():
    db = parse_store_database(
        "eu-1=postgresql://smp:s%40cret@db.example:6432/smp_server_store"
        "?schema=relay_one&sslmode=require&connect_timeout=5"
    )
    assert db.router == "eu-1"
    assert db.jdbc_url == "jdbc:postgresql://db.example:6432/smp_server_store"
    assert db.schema == "relay_one" and db.table("msg_queues") == "relay_one.msg_queues"
    assert db.properties == {
        "user": "smp", "password": "s@cret", "driver": "org.postgresql.Driver",
        "sslmode": "require", "connectTimeout": "5",
    }  # fmt: skip
    assert "s@cret" not in db.shown and "s%40cret" not in db.shown
    assert db.shown.startswith("postgresql://smp:***@db.example:6432/")


def test_the_defaults_are_the_routers_and_libpqs(monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    db = parse_store_database("postgresql://smp@/smp_server_store")
    assert (db.router, db.schema, db.host, db.port) == ("smp_server_store", "smp_server",
                                                        "localhost", 5432)  # fmt: skip
    assert "password" not in db.properties
    monkeypatch.setenv("PGPASSWORD", "from-env")
    db = parse_store_database("postgres://smp@127.0.0.1")
    assert db.jdbc_url == "jdbc:postgresql://127.0.0.1:5432/smp"  # libpq: the user's database
    assert db.properties["password"] == "from-env"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("mysql://smp@db/smp", "takes a postgresql:// URL"),
        ("db.example/smp", "takes a postgresql:// URL"),
        ("postgresql://smp@db:notaport/smp", "bad port"),
        ("postgresql://smp@db/smp?schema=Bad-Name", "not a schema name"),
        ("postgresql://smp@/smp?host=/var/run/postgresql", "connects over TCP"),
        ("postgresql://smp@db/smp?colour=blue", "unknown parameter 'colour'"),
        ("eu 1=postgresql://smp@db/smp", "router name 'eu 1'"),
        ("postgresql://smp:pw@db:x/smp", "postgresql://smp:***@db:x/smp"),
    ],
)
def test_a_bad_url_is_refused_with_its_reason(text, says, monkeypatch):
    monkeypatch.delenv("PGUSER", raising=False)
    with pytest.raises(UsageError, match=re.escape(says)):
        parse_store_database(text)


def _covering(ranges: list[str], first_byte: int) -> int:
    """How many of the predicates a key starting with `first_byte` satisfies."""
    hits = 0
    for predicate in ranges:
        lower = re.search(r">= decode\('([0-9a-f]{2})'", predicate)
        upper = re.search(r"< decode\('([0-9a-f]{2})'", predicate)
        if predicate == "TRUE" or (
            (lower is None or first_byte >= int(lower.group(1), 16))
            and (upper is None or first_byte < int(upper.group(1), 16))
        ):
            hits += 1
    return hits


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 256])
def test_the_key_ranges_cover_every_key_once(partitions):
    ranges = byte_ranges("recipient_id", partitions)
    assert len(ranges) == partitions
    assert all(_covering(ranges, b) == 1 for b in range(256))


def test_partitions_follow_the_catalogs_estimate_unless_given():
    assert partitions_for(0) == 1
    assert partitions_for(48_500_000) == 49
    assert partitions_for(10**12) == 256
    assert partitions_for(48_500_000, wanted=4) == 4


# --- the command line ---------------------------------------------------------------------


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return code, lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stats_needs_logs_or_a_database(tmp_path, capsys):
    code, line = run(["stats", "--out", str(tmp_path / "o")], capsys)
    assert (code, line) == (
        2, "smp-pipeline: error: stats needs stats logs, or a router's database with --db"
    )


def test_a_bad_db_url_is_exit_2_before_anything_runs(tmp_path, capsys):
    code, line = run(["stats", "--out", str(tmp_path / "o"), "--db", "mysql://x@y/z"], capsys)
    assert code == 2
    assert line.endswith("argument --db: --db takes a postgresql:// URL, not 'mysql://x@y/z'")


def test_a_missing_driver_jar_is_exit_2_and_says_what_to_install(tmp_path, capsys):
    jar = tmp_path / "postgresql.jar"
    code, line = run(["stats", "--out", str(tmp_path / "o"), "--jdbc-jar", str(jar),
                      "--db", "postgresql://smp@127.0.0.1/smp"], capsys)  # fmt: skip
    assert code == 2
    assert f"no PostgreSQL JDBC driver at {jar}: install Debian's libpostgresql-jdbc-java" in line


@pytest.mark.parametrize("flag", [["--jdbc-jar", "x.jar"], ["--db-partitions", "4"]])
def test_a_db_option_without_a_database_is_refused(flag, tmp_path, capsys):
    log = tmp_path / "eu-1.csv"
    log.write_text("time,period\n")
    code, line = run(["stats", str(log), "--out", str(tmp_path / "o"), *flag], capsys)
    assert (code, line) == (2, f"smp-pipeline: error: {flag[0]} is for --db")


def test_two_databases_of_one_name_are_refused(tmp_path, capsys):
    url = "postgresql://smp@127.0.0.1/smp"
    code, line = run(["stats", "--out", str(tmp_path / "o"), "--db", url, "--db",
                      url + "?schema=other"], capsys)  # fmt: skip
    assert code == 2 and "router smp is given twice" in line


def test_a_database_that_cannot_be_reached_is_exit_1_without_its_password(tmp_path, capsys):
    port = _closed_port()
    url = f"postgresql://smp:s3cret@127.0.0.1:{port}/smp"
    code, line = run(["stats", "--out", str(tmp_path / "o"), "--db", url], capsys)
    assert code == 1
    assert line.startswith(
        f"smp-pipeline: error: cannot reach the database postgresql://smp:***@127.0.0.1:{port}/smp"
    )
    assert "s3cret" not in line
    assert not Path(tmp_path / "o").exists()


def test_the_store_chart_adds_routers_up_per_day_and_is_drawn(tmp_path):
    day, next_day = date(2024, 5, 1), date(2024, 5, 2)
    rows = [
        {"router": "eu-1", "day": day, "queues_stored": 10, "msgs_stored": 3},
        {"router": "us-2", "day": day, "queues_stored": 5, "msgs_stored": 0},
        {"router": "eu-1", "day": next_day, "queues_stored": 12, "msgs_stored": 1},
    ]
    totals, by_router = store_totals(rows)
    assert totals == [
        {"day": day, "routers": 2, "queues_stored": 15, "msgs_stored": 3},
        {"day": next_day, "routers": 1, "queues_stored": 12, "msgs_stored": 1},
    ]
    assert sorted(by_router) == ["eu-1", "us-2"]
    path = write_store_chart(tmp_path / "charts", rows)
    assert path.name == "store.png" and path.read_bytes()[:4] == b"\x89PNG"
