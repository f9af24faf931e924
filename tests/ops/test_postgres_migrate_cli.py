"""Moving a data directory into PostgreSQL and out through the real command line:
`migrate-store` with its --db-* flags and `database import|export` with the reference's
(journal -> postgres -> sqlite -> postgres -> journal, every queue, link and message
kept); a schema that holds queues refused as a destination in one line; and the
configuration file's store keys rewritten, so that it never names a kind the data
directory no longer holds."""

from __future__ import annotations

import os
import re
from pathlib import Path

import trio
from ops_helpers import run_cli
from postgres_server import schema_for, shared_server

from router.server.cli.main import main
from router.server.cli.migrate import database_settings
from router.server.settings.config_file import CONFIG_FILE_NAME
from store import open_stores, read_store_kind
from store.interfaces import Message, Party, QueueLinkData, QueueRecord, WriteResult

QUEUES = 9
QUOTA = 3


async def fill(data: Path) -> tuple[list[QueueRecord], dict[bytes, QueueLinkData],
                                    dict[bytes, list[Message]]]:
    """A journal store of QUEUES queues, every other one with a link, holding 0..QUOTA
    messages each; the last one past its quota (it holds the QUOTA marker)."""
    records, links, sent = [], {}, {}
    async with open_stores("journal", data) as stores:
        for i in range(QUEUES):
            link = None
            rec = QueueRecord(os.urandom(24), os.urandom(24), os.urandom(44), os.urandom(32),
                              None, True)
            if i % 2:
                link = QueueLinkData(os.urandom(24), b"fixed %d" % i, b"user %d" % i)
                rec = QueueRecord(rec.recipient_id, rec.sender_id, rec.recipient_key,
                                  rec.rcv_dh_secret, None, True, link_id=link.link_id,
                                  queue_mode=b"C")
                links[rec.recipient_id] = link
            assert await stores.queues.add_queue(rec, link) is None
            records.append(rec)
            sent[rec.recipient_id] = []
            for j in range(i % (QUOTA + 1)):
                m = Message(os.urandom(24), 100 + j, b"T", b"message %d of queue %d" % (j, i))
                assert await stores.messages.write_message(rec.recipient_id, m, QUOTA) in (
                    WriteResult.STORED, WriteResult.STORED_INTO_EMPTY)
                sent[rec.recipient_id].append(m)
        full = records[QUOTA]  # i == QUOTA: QUOTA messages
        refused = Message(os.urandom(24), 999, b"T", b"refused")
        assert await stores.messages.write_message(full.recipient_id, refused, QUOTA) is (
            WriteResult.QUOTA_EXCEEDED)
        sent[full.recipient_id].append(Message(refused.msg_id, refused.ts, b"", b"", True))
    return records, links, sent


async def holds_everything(data: Path, kind: str, records, links, sent, **settings) -> None:
    assert read_store_kind(data) == kind
    async with open_stores(kind, data, **settings) as stores:
        held = sorted([r async for r in stores.queues.iter_queues()], key=lambda r: r.recipient_id)
        assert held == sorted(records, key=lambda r: r.recipient_id), kind
        for rid, link in links.items():
            assert await stores.queues.get_link(rid) == link, kind
            found = await stores.queues.get_queue(Party.LINK, link.link_id)
            assert found is not None and found.recipient_id == rid, kind
        for rid, messages in sent.items():
            assert [m async for m in stores.messages.iter_messages(rid)] == messages, kind


async def in_process(capsys, *args: str) -> tuple[int, str, str]:
    """`smp-router ARGS` run by this process (quicker than starting one), as run_cli."""
    def run() -> int:
        try:
            return main(list(args))
        except SystemExit as e:  # a usage error, from argparse
            return int(e.code or 0)

    capsys.readouterr()
    code = await trio.to_thread.run_sync(run)
    out, err = capsys.readouterr()
    return code, out, err


def moved(out: str, kind: str, records, sent) -> None:
    n_messages = sum(map(len, sent.values()))
    assert f"{len(records)} queues and {n_messages} messages now in a {kind} store" in out, out


async def test_journal_postgres_sqlite_postgres_journal_by_flags_keeps_everything(tmp_path):
    data = tmp_path / "data"
    url = shared_server().url
    first, second = schema_for(tmp_path / "first"), schema_for(tmp_path / "second")
    with trio.fail_after(120):
        records, links, sent = await fill(data)
        n_messages = sum(map(len, sent.values()))

        code, out, err = await run_cli(
            "migrate-store", "--data-dir", str(data), "--to", "postgres",
            "--db-connection", url, "--db-schema", first, "--db-pool-size", "2",
        )
        assert code == 0, err
        moved(out, "postgres", records, sent)
        last = [line for line in err.splitlines() if line.lstrip().startswith("messages")]
        assert last and last[-1].endswith(f"] {n_messages}/{n_messages}"), err
        assert (data / "postgres-store" / "DATABASE").read_text() == f"{url}\nschema {first}\n"
        await holds_everything(data, "postgres", records, links, sent,
                               db_connection=url, db_schema=first)

        code, out, err = await run_cli(
            "migrate-store", "--data-dir", str(data), "--to", "sqlite",
            "--db-connection", url, "--db-schema", first, "--db-pool-size", "3",
        )
        assert code == 0, err
        moved(out, "sqlite", records, sent)
        await holds_everything(data, "sqlite", records, links, sent)

        # the reference's command and flag names: database import --database --schema
        code, out, err = await run_cli(
            "database", "import", "--data-dir", str(data), "--database", url,
            "--schema", second, "--pool-size", "1",
        )
        assert code == 0, err
        moved(out, "postgres", records, sent)
        await holds_everything(data, "postgres", records, links, sent,
                               db_connection=url, db_schema=second)

        code, out, err = await run_cli(
            "database", "export", "--data-dir", str(data), "--db-connection", url,
            "--db-schema", second,
        )
        assert code == 0, err
        moved(out, "journal", records, sent)  # the store log, by default
        await holds_everything(data, "journal", records, links, sent)
        (kept,) = re.findall(rf"the old store is kept in schema {second} of {re.escape(url)}, "
                             r"named in (\S+) \(drop it with DROP SCHEMA", out)
        assert (Path(kept) / "DATABASE").read_text() == f"{url}\nschema {second}\n"


async def test_a_schema_holding_queues_is_refused_as_a_destination_in_one_line(
    tmp_path, capsys
):
    data, other = tmp_path / "data", tmp_path / "other"
    url, schema = shared_server().url, schema_for(tmp_path)
    flags = ("--db-connection", url, "--db-schema", schema)
    with trio.fail_after(120):
        await fill(data)
        await fill(other)
        code, _, err = await in_process(capsys, "database", "import", "--data-dir", str(data),
                                        *flags)
        assert code == 0, err
        code, out, err = await in_process(capsys, "database", "import", "--data-dir",
                                          str(other), *flags)
        assert code == 2 and out == "", err
        assert err.splitlines() == [
            f"smp-router: error: the postgres store to migrate into already holds {QUEUES} "
            "queues (name an empty database schema, or empty this one)"
        ]
        assert read_store_kind(other) == "journal"  # nothing switched
        assert sorted(p.name for p in other.iterdir()) == [
            "STORE_KIND", "journal-store", "router.lock"]  # no backup made, no copy left
        # the wrong way round, and the reference's tables this router does not split
        for args, reason in (
            (("database", "import", "--data-dir", str(data)), "holds a postgres store already"),
            (("database", "export", "--data-dir", str(other)), "holds a journal store, not "
             "postgres"),
            (("database", "import", "--data-dir", str(other), "--table", "queues"),
             "--table queues: only all is taken"),
            (("migrate-store", "--data-dir", str(data), "--to", "sqlite", "--db-pool-size",
              "0"), "--db-pool-size"),
        ):
            code, out, err = await in_process(capsys, *args)
            assert code == 2 and out == "" and len(err.splitlines()) == 1, err
            assert reason in err, err


def test_flags_replace_the_files_database_settings(tmp_path):
    (tmp_path / CONFIG_FILE_NAME).write_text(
        "[STORE_LOG]\ndb_connection = postgresql://smp@db.example/smp\n"
        "db_schema = from_file\ndb_pool_size = 7\n"
    )
    assert database_settings(tmp_path, {"db_connection": None, "db_schema": "from_flag",
                                        "db_pool_size": 2}) == {
        "db_connection": "postgresql://smp@db.example/smp", "db_schema": "from_flag",
        "db_pool_size": 2,
    }


async def test_the_reference_routers_store_keys_follow_the_data_both_ways(tmp_path, capsys):
    data = tmp_path / "data"
    ini = data / CONFIG_FILE_NAME
    url, schema = shared_server().url, schema_for(tmp_path)
    with trio.fail_after(120):
        records, links, sent = await fill(data)
        # into postgres: the file's store key is changed to it
        ini.write_text(f"[STORE_LOG]\nstore = journal\ndb_connection = {url}\n"
                       f"db_schema = {schema}\n")
        code, out, err = await run_cli("database", "import", "--data-dir", str(data))
        assert code == 0, err
        assert f"{ini}:2: [STORE_LOG] store changed from journal to postgres" in out
        ini.write_text(ini.read_text().replace(
            "store = postgres\n", "store_queues = database\nstore_messages = database\n"))
        code, out, err = await in_process(capsys, "config", "check", "--data-dir", str(data))
        assert code == 0 and "\nstore: postgres\n" in out, err

        # out of postgres: the reference's keys would name a kind no longer there
        code, out, err = await run_cli("migrate-store", "--data-dir", str(data), "--to", "sqlite")
        assert code == 0, err
        assert (f"{ini}:2: [STORE_LOG] store_queues = database commented out: the data "
                "directory holds a sqlite store now") in out
        assert f"{ini}:3: [STORE_LOG] store_messages = database commented out" in out
        assert ini.read_text() == (f"[STORE_LOG]\n# store_queues = database\n"
                                   f"# store_messages = database\ndb_connection = {url}\n"
                                   f"db_schema = {schema}\n")
        code, out, err = await in_process(capsys, "config", "check", "--data-dir", str(data))
        assert code == 0 and "\nstore: sqlite\n" in out, err
        await holds_everything(data, "sqlite", records, links, sent)

        # a file that still says so is refused naming its line, before anything opens
        ini.write_text(ini.read_text().replace("# store_messages", "store_messages"))
        code, out, err = await in_process(capsys, "config", "check", "--data-dir", str(data))
        assert code == 2 and out == "", err
        assert err.startswith(f"smp-router: error: {ini}:3: [STORE_LOG] store_messages: "
                              f"database (the postgres store), but the data directory {data} "
                              "holds a sqlite store"), err
