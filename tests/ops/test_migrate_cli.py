"""migrate-store through the real command line: its progress counts messages, it
rewrites the configuration file's store key, and the router then serves the moved data;
a file whose store key contradicts the data directory is refused naming FILE:LINE."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from ops_helpers import run_cli, serving

from router.client import MessageEvent, open_client
from router.server.settings.config_file import CONFIG_FILE_NAME
from store import read_store_kind

QUEUES, PER_QUEUE = 19, 2


async def test_migrate_then_serve_with_the_configuration_file_rewritten(tmp_path):
    data = tmp_path / "data"
    ini = data / CONFIG_FILE_NAME
    with trio.fail_after(120):
        code, out, _ = await run_cli("init", "--data-dir", str(data))
        assert code == 0
        text = ini.read_text().replace("port: 5224", "port: 0")
        text = text.replace("# store: \n", "store: journal\n").replace("# store:\n",
                                                                      "store: journal\n")
        assert "\nstore: journal\n" in text
        ini.write_text(text)
        ini.chmod(0o600)
        store_line = text.splitlines().index("store: journal") + 1
        async with serving("--data-dir", str(data), "--log-level", "error") as (_, address):
            async with open_client(address) as client:
                queues = [await client.create_queue() for _ in range(QUEUES)]
                for q in queues:
                    for n in range(PER_QUEUE):
                        await client.send(q.sender_id, b"before the move %d" % n)
        assert read_store_kind(data) == "journal"

        code, out, err = await run_cli("migrate-store", "--data-dir", str(data), "--to", "sqlite")
        assert code == 0, err
        total = QUEUES * PER_QUEUE
        last_messages = [line for line in err.splitlines() if line.lstrip().startswith("messages")]
        assert last_messages and last_messages[-1].endswith(f"] {total}/{total}"), err
        assert f"{QUEUES} queues and {total} messages now in a sqlite store" in out
        (kept,) = re.findall(r"the old store is kept in (\S+)", out)
        assert kept.startswith(str(data / "journal-store.old-")) and Path(kept).is_dir()
        assert f"{ini}:{store_line}: [STORE_LOG] store changed from journal to sqlite" in out
        assert ini.read_text() == text.replace("\nstore: journal\n", "\nstore: sqlite\n")
        assert (ini.stat().st_mode & 0o777) == 0o600

        async with serving("--data-dir", str(data), "--log-level", "error") as (_, address):
            async with open_client(address) as client:
                for q in queues[:3]:
                    await client.subscribe(q)
                    event = await client.next_event()
                    assert isinstance(event, MessageEvent) and event.body == b"before the move 0"


async def test_a_store_key_the_data_directory_contradicts_is_named_with_file_and_line(tmp_path):
    data = tmp_path / "data"
    ini = data / CONFIG_FILE_NAME
    with trio.fail_after(60):
        async with serving("--data-dir", str(data), "--port", "0", "--store", "sqlite",
                           "--log-level", "error"):
            pass
        ini.write_text("[TRANSPORT]\nport = 0\n\n[STORE_LOG]\nstore = journal\n")
        for command in (["serve"], ["config", "check"]):
            code, out, err = await run_cli(*command, "--data-dir", str(data))
            assert code == 2 and out == "" and len(err.splitlines()) == 1, err
            assert err.startswith(f"smp-router: error: {ini}:5: [STORE_LOG] store: journal, "
                                  f"but the data directory {data} holds a sqlite store; "
                                  "set `store: sqlite` there"), err
            assert f"smp-router migrate-store --data-dir {data} --to journal" in err
        # A flag overrides the file, and its own error names the flag's way out.
        code, _, err = await run_cli("serve", "--data-dir", str(data), "--store", "journal")
        assert code == 2 and "start with --store sqlite" in err
        # migrate-store with a key that already agrees, or without one, says so.
        code, out, _ = await run_cli("migrate-store", "--data-dir", str(data), "--to", "journal")
        assert code == 0 and f"{ini}:5: [STORE_LOG] store already says journal" in out
        ini.write_text("[TRANSPORT]\nport = 0\n")
        code, out, _ = await run_cli("migrate-store", "--data-dir", str(data), "--to", "sqlite")
        assert code == 0 and re.search(r"no store key; serve uses the sqlite store", out)
        assert ini.read_text() == "[TRANSPORT]\nport = 0\n"
