"""`smp-router serve`'s signals through the real command line: SIGHUP under load keeps
every client and applies what can change live, reopens the log file and names what
needs a restart; a broken file on SIGHUP changes nothing; SIGUSR2 drains and ends the
process."""

from __future__ import annotations

import json
import signal
import socket

import pytest
import trio
from ops_helpers import http_get, run_cli, serving

from router.client import MessageEvent, SMPError, open_client

BASE = """[TRANSPORT]
port = {port}
[STORE_LOG]
store = memory
quota = 1000
[AUTH]
create_password = first
[LOG]
level = info
file = {log}
[INFORMATION]
operator = Before
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def wait_for(predicate, what: str) -> None:
    with trio.fail_after(15):
        while not predicate():
            await trio.sleep(0.05)


async def test_sighup_under_load_keeps_the_clients_and_applies_the_new_configuration(tmp_path):
    port, log_file = free_port(), tmp_path / "router.log"
    config = tmp_path / "r.ini"
    config.write_text(BASE.format(port=port, log=log_file))
    with trio.fail_after(90):
        async with serving("--config", str(config)) as (process, address):
            async with open_client(address) as recipient, open_client(address) as sender:
                q = await recipient.create_queue(subscribe=True, basic_auth=b"first")
                sent: list[bytes] = []
                received: list[bytes] = []
                stop, stopped = trio.Event(), trio.Event()

                async def keep_sending() -> None:
                    n = 0
                    while not stop.is_set():
                        body = b"m%d" % n
                        await sender.send(q.sender_id, body)
                        sent.append(body)
                        n += 1
                        await trio.sleep(0.005)
                    stopped.set()

                async def keep_receiving() -> None:
                    while True:
                        event = await recipient.next_event()
                        assert isinstance(event, MessageEvent)
                        received.append(event.body)
                        await recipient.ack(q, event.msg_id)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(keep_sending)
                    nursery.start_soon(keep_receiving)
                    await wait_for(lambda: len(received) > 20, "traffic before")
                    # logrotate's move, then the new configuration and SIGHUP
                    log_file.rename(tmp_path / "router.log.1")
                    config.write_text(
                        BASE.format(port=free_port(), log=log_file)
                        .replace("quota = 1000", "quota = 500")
                        .replace("create_password = first", "create_password = second")
                        .replace("level = info", "level = debug")
                        .replace("operator = Before", "operator = After"))
                    process.send_signal(signal.SIGHUP)
                    await wait_for(lambda: log_file.exists()
                                   and "configuration reloaded" in log_file.read_text(),
                                   "the reload's log line")
                    before = len(received)
                    await wait_for(lambda: len(received) > before + 20, "traffic after")
                    stop.set()
                    # Its last SEND answered: a MSG can come before its OK does.
                    await stopped.wait()
                    await wait_for(lambda: len(received) == len(sent), "the last messages")
                    nursery.cancel_scope.cancel()
                assert received == sent  # nothing lost, nothing twice, in order
                # The same connections go on; the new password and operator are in force.
                with pytest.raises(SMPError, match="AUTH"):
                    await recipient.create_queue(basic_auth=b"first")
                await recipient.create_queue(basic_auth=b"second")
            status, _, body = await http_get(port, "/?format=json")
            facts = json.loads(body)
            assert status == 200 and facts["information"] == {"operator": "After"}
            assert facts["queueQuota"] == 500
    text = log_file.read_text()
    reload_line = next(line for line in text.splitlines() if "configuration reloaded" in line)
    assert " INFO smp-router: SIGHUP: configuration reloaded" in reload_line  # routine
    assert "[STORE_LOG] quota 1000 -> 500" in reload_line
    assert "[AUTH] create_password changed" in reload_line
    assert "[LOG] level info -> debug" in reload_line and "[INFORMATION] changed" in reload_line
    assert "second" not in text  # a password is never logged
    restart_line = next(line for line in text.splitlines() if "only with a restart" in line)
    assert f"port {port} -> " in restart_line
    assert "DEBUG" in text  # the new level is in force
    assert "router listening" in (tmp_path / "router.log.1").read_text()


async def test_a_configuration_with_an_error_on_sighup_changes_nothing(tmp_path):
    port, log_file = free_port(), tmp_path / "router.log"
    config = tmp_path / "r.ini"
    config.write_text(BASE.format(port=port, log=log_file))
    with trio.fail_after(60):
        async with serving("--config", str(config)) as (process, address):
            async with open_client(address) as client:
                config.write_text(BASE.format(port=port, log=log_file)
                                  .replace("quota = 1000", "quota = none"))
                process.send_signal(signal.SIGHUP)
                await wait_for(lambda: "not reloaded" in log_file.read_text(), "the error")
                await client.ping()
                q = await client.create_queue(basic_auth=b"first")
                await client.send(q.sender_id, b"still served")
    line = next(line for line in log_file.read_text().splitlines() if "not reloaded" in line)
    assert f"{config}:5: [STORE_LOG] quota: must be a whole number" in line


async def test_sigusr2_drains_the_clients_and_ends_the_process(tmp_path):
    port, log_file = free_port(), tmp_path / "router.log"
    config = tmp_path / "r.ini"
    config.write_text(BASE.format(port=port, log=log_file))
    with trio.fail_after(60):
        async with serving("--config", str(config)) as (process, address):
            async with open_client(address) as client:
                await client.ping()
                process.send_signal(signal.SIGUSR2)
                assert await process.wait() == 0
                with pytest.raises(Exception):  # noqa: B017 - the connection is gone
                    await client.ping()
    text = log_file.read_text()
    assert "draining on SIGUSR2" in text and "stopping: drained" in text
    drain_lines = [line for line in text.splitlines() if "drain" in line]
    assert drain_lines and all(" INFO " in line for line in drain_lines), drain_lines


async def test_smp_router_control_drain_ends_the_serving_process(tmp_path):
    port, log_file = free_port(), tmp_path / "router.log"
    control_port = free_port()
    config = tmp_path / "r.ini"
    config.write_text(BASE.format(port=port, log=log_file).replace(
        "[TRANSPORT]\n", f"[TRANSPORT]\ncontrol_port = {control_port}\ndrain_period = 1\n")
        .replace("create_password = first\n",
                 "create_password = first\ncontrol_port_admin_password = adm\n"))
    with trio.fail_after(60):
        async with serving("--config", str(config)) as (process, address):
            async with open_client(address) as client:
                await client.ping()
                code, out, err = await run_cli("control", "--config", str(config), "drain")
                assert code == 0 and err == "", err
                assert out.startswith("ok: draining: no new clients, the connected ones "
                                      "closed over 1 s")
                assert await process.wait() == 0
    assert "stopping: drained" in log_file.read_text()
