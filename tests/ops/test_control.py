"""The control port: every command, and what wrong or missing passwords get."""

from __future__ import annotations

import base64
import socket
import sys
from pathlib import Path

import pytest
import trio
from ops_helpers import ControlClient, http_get, open_control
from worker_count import one_process

from router.client import DeletedEvent, EndEvent, SMPError, open_client
from router.server.router import RouterInfo
from store.factory import MESSAGES_SNAPSHOT, QUEUES_SNAPSHOT, store_dir

ADMIN, USER = "admin-pw", "user-pw"
ADMIN_ONLY = ["delete QQ", "block QQ", "unblock QQ", "save", "suspend", "resume", "drain"]
USER_COMMANDS = ["stats", "clients", "status QQ"]


def qid(queue) -> str:
    return base64.urlsafe_b64encode(queue.recipient_id).decode().rstrip("=")


@pytest.fixture
async def router(start_router, tmp_path) -> RouterInfo:
    return await start_router(control_port=0, control_admin_password=ADMIN,
                              control_user_password=USER, data_dir=tmp_path / "data")


async def session(info: RouterInfo, password: str | None) -> ControlClient:
    control = await open_control(info.control_port)
    if password is not None:
        await control.command(f"auth {password}")
    return control


@pytest.mark.parametrize("password", [None, "wrong", ""], ids=["missing", "wrong", "empty"])
async def test_without_a_valid_password_every_command_but_auth_help_quit_is_auth(
    router, password
):
    with trio.fail_after(10):
        control = await open_control(router.control_port)
        if password is not None:
            assert await control.command(f"auth {password}") == ["Current role is none"]
        for line in ADMIN_ONLY + USER_COMMANDS:
            assert await control.command(line) == ["AUTH"], line
        assert not router.router.gate.suspended


async def test_the_user_password_gives_the_read_only_commands_only(router):
    with trio.fail_after(10):
        control = await open_control(router.control_port)
        assert await control.command(f"auth {USER}") == ["Current role is user"]
        for line in ADMIN_ONLY:
            assert await control.command(line) == ["AUTH"], line
        stats = await control.until("stats", lambda line: line.startswith("suspended:"))
        assert "connections: 0" in stats


async def test_a_wrong_password_after_a_good_one_drops_the_role(router):
    with trio.fail_after(10):
        control = await session(router, ADMIN)
        assert await control.command("auth nope") == ["Current role is none"]
        assert await control.command("stats") == ["AUTH"]


async def test_stats_and_clients_describe_the_router(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            await client.create_queue(subscribe=True)
            control = await session(router, ADMIN)
            stats = await control.until("stats", lambda line: line.startswith("suspended:"))
            assert {"connections: 1", "queues_created: 1", "subscriptions: 1",
                    "queues_stored: 1", "suspended: no"} <= set(stats)
            clients = await control.until("clients", lambda line: line.endswith(" clients"))
            assert clients[-1] == "1 clients"
            assert clients[1].split()[-2:] == ["1", "0"]  # one subscription, none waiting


async def test_status_delete_block_unblock_a_queue(router):
    with trio.fail_after(20):
        async with open_client(router.address) as owner, open_client(router.address) as other:
            doomed = await owner.create_queue(subscribe=True)
            blocked = await owner.create_queue()
            await other.send(blocked.sender_id, b"hello")
            control = await session(router, ADMIN)
            assert await control.command(f"status {qid(blocked)}") == [
                "status: active, secured: no, messages: 1"
            ]
            assert await control.command("status AAAA") == ["error: no such queue"]
            assert await control.command("status") == ["error: usage: status QUEUE_ID"]

            assert await control.command(f"delete {qid(doomed)}") == ["ok"]
            event = await owner.next_event()
            assert isinstance(event, DeletedEvent) and event.recipient_id == doomed.recipient_id
            assert await control.command(f"delete {qid(doomed)}") == ["error: no such queue"]
            with pytest.raises(SMPError, match="AUTH"):
                await other.send(doomed.sender_id, b"gone")

            await owner.subscribe(blocked)
            await owner.next_event()  # the MSG waiting in it
            assert await control.command(f"block {qid(blocked)} content") == ["ok"]
            end = await owner.next_event()
            assert isinstance(end, EndEvent) and end.recipient_id == blocked.recipient_id
            assert await control.command(f"status {qid(blocked)}") == [
                "status: blocked (content), secured: no, messages: 1"
            ]
            with pytest.raises(SMPError, match="BLOCKED"):
                await other.send(blocked.sender_id, b"more")
            with pytest.raises(SMPError, match="BLOCKED"):
                await owner.subscribe(blocked)
            assert await control.command(f"block {qid(blocked)} because") == [
                "error: usage: block QUEUE_ID [spam|content] [notice [SECONDS]]"
            ]
            assert await control.command(f"unblock {qid(blocked)}") == ["ok"]
            assert await control.command(f"unblock {qid(blocked)}") == [
                "error: queue is not blocked"
            ]
            await other.send(blocked.sender_id, b"more")  # works again
            assert await control.command("block AAAA") == ["error: no such queue"]


async def test_a_block_outlives_a_restart(start_router, tmp_path):
    # sqlite: a second memory store on a data directory in use is refused (its
    # snapshot.reserve says the first has not saved), and the first is still running.
    config = dict(control_port=0, control_admin_password=ADMIN, data_dir=tmp_path / "d",
                  store="sqlite")
    with trio.fail_after(20):
        first = await start_router(**config)
        async with open_client(first.address) as client:
            q = await client.create_queue()
        control = await session(first, ADMIN)
        assert await control.command(f"block {qid(q)}") == ["ok"]
        second = await start_router(**config)  # reads the same data directory
        assert second.router.blocked.get(q.recipient_id) == "spam"


async def test_a_deleted_queue_leaves_the_blocked_list(router):
    """DEL is the one command a blocked queue still takes; the queue's block goes
    with it, as with the control port's delete."""
    with trio.fail_after(10):
        async with open_client(router.address) as owner:
            first, second = await owner.create_queue(), await owner.create_queue()
            control = await session(router, ADMIN)
            for queue in (first, second):
                assert await control.command(f"block {qid(queue)}") == ["ok"]
            await owner.delete(first)
            assert await control.command(f"delete {qid(second)}") == ["ok"]
            assert router.router.blocked.get(first.recipient_id) is None
            assert router.router.blocked.get(second.recipient_id) is None


async def test_save_writes_the_memory_snapshot_now(router, tmp_path):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"kept")
            control = await session(router, ADMIN)
            assert await control.command("save") == ["ok: saved 1 queues and 1 messages"]
    directory = store_dir(tmp_path / "data", "memory")
    assert (directory / QUEUES_SNAPSHOT).exists() and (directory / MESSAGES_SNAPSHOT).exists()


async def test_save_on_a_durable_store_says_it_is_on_disk(start_router, tmp_path):
    info = await start_router(control_port=0, control_admin_password=ADMIN, store="sqlite",
                              data_dir=tmp_path / "sq")
    with trio.fail_after(10):
        control = await session(info, ADMIN)
        assert await control.command("save") == ["ok: the sqlite store is on disk already"]


async def test_suspend_stops_commands_and_deliveries_and_resume_restarts_them(router):
    with trio.fail_after(20):
        async with open_client(router.address) as recipient, \
                open_client(router.address) as sender:
            q = await recipient.create_queue(subscribe=True)
            control = await session(router, ADMIN)
            assert (await control.command("suspend"))[0].startswith("ok: suspended")
            assert router.listener is not None and router.listener.suspended
            async with trio.open_nursery() as nursery:
                sent, joined = trio.Event(), trio.Event()

                async def send() -> None:
                    await sender.send(q.sender_id, b"while suspended")
                    sent.set()

                async def join() -> None:
                    async with open_client(router.address) as newcomer:
                        await newcomer.ping()
                        joined.set()

                nursery.start_soon(send)
                nursery.start_soon(join)
                # While suspended, a PING is not answered either: nothing is read.
                with trio.move_on_after(0.5) as waited:
                    await recipient.ping()
                assert waited.cancelled_caught and not sent.is_set() and not joined.is_set()
                assert router.router.statistics().connections_total == 2
                assert router.router.statistics().messages_sent == 0
                assert await control.command("resume") == ["ok: resumed"]
            assert sent.is_set() and joined.is_set() and not router.listener.suspended
            event = await recipient.next_event()
            assert event.recipient_id == q.recipient_id


async def test_help_lists_the_commands_and_quit_ends_the_session(router):
    with trio.fail_after(10):
        control = await open_control(router.control_port)
        lines = await control.until("help", lambda line: line.startswith("drain"))
        assert "stats (user role)" in lines and "delete (admin role)" in lines
        assert "memory (admin role)" in lines and "drain (admin role)" in lines
        assert await control.command("frobnicate") == [
            "error: unknown command 'frobnicate'; try help"
        ]
        await control.stream.send_all(b"quit\n")
        assert await control.stream.receive_some(10) == b""


async def test_an_overlong_line_ends_the_session_not_the_router(router):
    with trio.fail_after(10):
        control = await open_control(router.control_port)
        await control.stream.send_all(b"x" * 10000)
        with pytest.raises((EOFError, trio.BrokenResourceError)):
            await control.read_line()
        again = await session(router, USER)
        assert await again.command("status") == ["error: usage: status QUEUE_ID"]


async def test_the_control_port_needs_a_password_in_the_configuration():
    from router.server import ConfigError, RouterConfig

    with pytest.raises(ConfigError, match="control port needs"):
        RouterConfig(control_port=0)



async def test_a_command_that_fails_ends_its_session_not_the_router(router, monkeypatch):
    async def broken(self) -> int:
        raise RuntimeError("store gone")

    monkeypatch.setattr(type(router.router.queues), "queue_count", broken)
    with trio.fail_after(10):
        control = await session(router, USER)
        await control.stream.send_all(b"stats\n")
        with pytest.raises((EOFError, trio.BrokenResourceError)):
            await control.read_line()
        again = await session(router, USER)
        assert await again.command("status") == ["error: usage: status QUEUE_ID"]


def smp_router(*args: str) -> list[str]:
    program = Path(sys.executable).with_name("smp-router")
    if program.exists():
        return [str(program), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


async def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    result = await trio.run_process(smp_router(*args), stdin=stdin, capture_stdout=True,
                                    capture_stderr=True, check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_smp_router_control_uses_the_configuration_password(router, tmp_path):
    config = tmp_path / "r.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      f"control_port_user_password = {USER}\n"
                      f"[TRANSPORT]\ncontrol_port = {router.control_port}\n")
    with trio.fail_after(30):
        code, out, err = await run_cli("control", "--config", str(config), "stats")
        assert code == 0 and err == "" and "connections: 0" in out
        code, out, err = await run_cli("control", "--config", str(config), "--role", "user",
                                       stdin=b"stats\nsuspend\nresume\n")
        assert code == 1 and out.splitlines()[-1] == "AUTH" and "suspended: no" in out
        assert err == "smp-router: error: the router refused `suspend`: AUTH\n"
        code, out, _ = await run_cli("control", "--config", str(config), "suspend")
        assert code == 0 and out.startswith("ok: suspended") and router.router.gate.suspended
        await run_cli("control", "--config", str(config), "resume")
        assert not router.router.gate.suspended


async def test_smp_router_control_errors_are_one_line_and_exit_2(router, tmp_path):
    wrong = tmp_path / "wrong.ini"
    wrong.write_text(f"[AUTH]\ncontrol_port_admin_password = nope\n"
                     f"[TRANSPORT]\ncontrol_port = {router.control_port}\n")
    no_port = tmp_path / "no-port.ini"
    no_port.write_text("[AUTH]\ncontrol_port_admin_password = x\n")
    with trio.fail_after(30):
        code, _, err = await run_cli("control", "--config", str(wrong), "stats")
        assert code == 2 and "refused the admin password" in err and len(err.splitlines()) == 1
        code, _, err = await run_cli("control", "--config", str(no_port), "stats")
        assert code == 2 and "no control port" in err
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
        code, _, err = await run_cli("control", "--config", str(wrong), "--port", str(port),
                                     "stats")
        assert code == 2 and f"127.0.0.1:{port}" in err


async def test_smp_router_control_exits_1_with_one_stderr_line_on_every_refusal(router, tmp_path):
    config = tmp_path / "r.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      f"control_port_user_password = {USER}\n"
                      f"[TRANSPORT]\ncontrol_port = {router.control_port}\n")
    refused = {
        ("--role", "user", "block", "AAAA"): "AUTH",
        ("frobnicate",): "error: unknown command 'frobnicate'; try help",
        ("status", "AAAA"): "error: no such queue",
        ("delete", "AAAA"): "error: no such queue",
        ("unblock", "AAAA"): "error: queue is not blocked",
        ("status",): "error: usage: status QUEUE_ID",
    }
    with trio.fail_after(60):
        for args, answer in refused.items():
            flags = list(args[:2]) if args[0] == "--role" else []
            words = args[2:] if flags else args
            code, out, err = await run_cli("control", "--config", str(config), *flags, *words)
            assert code == 1, args
            assert out == f"{answer}\n", args
            assert err == f"smp-router: error: the router refused `{' '.join(words)}`: {answer}\n"


async def test_smp_router_control_stats_prints_each_line_once(router, tmp_path):
    config = tmp_path / "r.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      f"[TRANSPORT]\ncontrol_port = {router.control_port}\n")
    with trio.fail_after(30):
        code, out, err = await run_cli("control", "--config", str(config), "stats")
    names = [line.split(":")[0] for line in out.splitlines()]
    assert code == 0 and err == ""
    assert len(names) == len(set(names)) and "messages_store_full" in names, names


async def test_drain_stops_accepting_closes_clients_over_the_period_then_ends_the_router(
    start_router, nursery
):
    from router.server import RouterConfig, serve_router

    ended = trio.Event()
    info: RouterInfo | None = None

    async def run() -> None:
        nonlocal info
        async with trio.open_nursery() as inner:
            info = await inner.start(serve_router, RouterConfig(
                port=0, control_port=0, control_admin_password=ADMIN, metrics_port=0))
        ended.set()  # serve_router returned by itself

    with trio.fail_after(20):
        nursery.start_soon(run)
        while info is None:
            await trio.sleep(0.01)
        async with open_client(info.address) as first, open_client(info.address) as second:
            await first.create_queue(subscribe=True)
            await second.ping()
            control = await session(info, ADMIN)
            assert await control.command("drain x") == [
                "error: usage: drain [SECONDS] (0 to 3600, default 30: drain_period)"]
            started = trio.current_time()
            assert (await control.command("drain 1"))[0].startswith("ok: draining")
            assert await control.command("drain 1") == ["error: the router is draining already"]
            assert info.listener is not None and info.listener.suspended
            status, _, body = await http_get(info.metrics_port, "/healthz")
            assert status == 503 and b'"draining"' in body
            await ended.wait()
            assert trio.current_time() - started < 3
            assert info.router.connections == {}


async def test_a_block_with_a_notice_reaches_v18_clients_with_it_and_older_ones_without(
    router: RouterInfo,
) -> None:
    """The client notice of ERR BLOCKED (docs/protocol.md#errors): from v18 only."""
    async with open_client(router.address) as owner:
        queue = await owner.create_queue()
        control = await session(router, ADMIN)
        assert await control.command(f"block {qid(queue)} spam notice 3600") == ["ok"]
        assert await control.command(f"block {qid(queue)} spam notice soon") == [
            "error: usage: block QUEUE_ID [spam|content] [notice [SECONDS]]"
        ]
        with pytest.raises(SMPError, match='BLOCKED reason=spam,notice=[{]"ttl":3600[}]'):
            await owner.subscribe(queue)
    async with open_client(router.address, versions=(9, 17)) as old:
        old.add_queue(queue)
        with pytest.raises(SMPError, match="BLOCKED reason=spam$"):
            await old.subscribe(queue)
