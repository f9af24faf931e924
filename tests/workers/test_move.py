"""Another count of workers on an existing data directory
(docs/workers.md#another-count-of-workers): `workers-move` takes the queues, their
messages, notifiers, links and blocked marks to their new homes, and every id of a
moved queue reaches it afterwards (SEND by sender id, SUB by recipient id, NSUB by
notifier id, LGET by link id), though ids minted under one count name unrelated
workers under another."""

from __future__ import annotations

import hashlib
import os
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace

import pytest
import trio
from loopback_router import running_router
from postgres_server import router_store_settings
from supervised import run, supervised

from bench.service_client import chain_of_two
from router.client import (
    AllReceivedEvent,
    MessageEvent,
    NotificationEvent,
    ServiceCertificate,
    SMPError,
    open_client,
)
from router.protocol import (
    IDS,
    LGET,
    LNK,
    NEW,
    QueueLink,
    Transmission,
    crypto,
    encode_command,
    encode_transmission,
    pad_block,
)
from router.protocol.ids_hash import queue_ids_hash
from router.server import RouterConfig
from router.server.cli.main import main
from router.server.core.blocked import BlockedQueues
from router.server.core.ownership import Ownership
from router.server.settings.config import ConfigError
from router.server.settings.datadir import lock_data_dir
from router.server.workers.in_process import workers_in_process
from router.server.workers.layout import check_worker_count, worker_dir
from router.server.workers.move import move_workers
from router.server.workers.owner_exceptions import OWNER_EXCEPTIONS_FILE, read_owner_exceptions
from store.durability import replace_durably

QUEUES = 10
SERVICE_QUEUES = 16


@asynccontextmanager
async def serving(config: RouterConfig, workers: int):
    """Three connections to the router of `workers` workers, spread over its workers."""
    check_worker_count(replace(config, workers=workers))  # as `serve` does: refuse or record
    async with AsyncExitStack() as stack:
        if workers == 1:
            infos = [await stack.enter_async_context(running_router(
                store=config.store, data_dir=config.data_dir, store_options=config.store_options))]
        else:
            infos = await stack.enter_async_context(workers_in_process(config, workers))
        yield [await stack.enter_async_context(open_client(infos[i % len(infos)].address))
               for i in range(3)]


async def _event(client, wanted, recipient_id: bytes | None = None):
    """The client's next event but the MSGs of the messages left for the next count in
    the queues it is still subscribed to."""
    while True:
        with trio.fail_after(10):
            event = await client.next_event()
        if not (isinstance(event, MessageEvent) and event.body == b"kept"
                and event.recipient_id != recipient_id):
            break
    assert isinstance(event, wanted), event
    return event


async def _new_contact(c, link_id: bytes):
    """A contact queue with a short link whose link id is `link_id` (the client's)."""
    corr_id = os.urandom(24)
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    body = encode_command(NEW(key, dh, None, False, False,
                              QueueLink(sender_id, b"fixed", b"user", link_id)), c.version)
    data = encode_transmission(Transmission(
        crypto.authorize(seed, c.session_id, corr_id, b"", body), corr_id, b"", body), c.version)
    await c.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
    with trio.fail_after(10):
        ids = await c.next_raw_response()
    assert isinstance(ids, IDS)
    return ids


async def _populate(clients):
    """Queues with a notifier and two messages each, and a contact queue's link."""
    queues, notifiers = [], []
    for i in range(QUEUES):
        c = clients[i % 3]
        queue = await c.create_queue(snd_secure=False)
        notifiers.append(await c.enable_notifications(queue))
        queues.append(queue)
        for n in range(2):
            await clients[(i + 1) % 3].send(queue.sender_id, b"before %d" % n)
    link_id = os.urandom(24)
    contact = await _new_contact(clients[0], link_id)
    return queues, notifiers, (link_id, contact.snd_id)


async def _check_every_id(clients, queues, notifiers, link, pending: list[bytes]) -> None:
    """Each queue's messages waiting (SUB by recipient id), a SEND by sender id from
    another connection delivered with its NMSG (NSUB by notifier id), one message
    left waiting for the next count, and the link found (LGET by link id)."""
    for i, (queue, creds) in enumerate(zip(queues, notifiers, strict=True)):
        recipient, sender, notified = clients[i % 3], clients[(i + 1) % 3], clients[(i + 2) % 3]
        await recipient.subscribe(queue)
        for body in pending:
            event = await _event(recipient, MessageEvent, queue.recipient_id)
            assert (event.recipient_id, event.body) == (queue.recipient_id, body)
            await recipient.ack(queue, event.msg_id)
        await notified.subscribe_notifications(creds)
        await sender.send(queue.sender_id, b"after", notify=True)
        event = await _event(recipient, MessageEvent, queue.recipient_id)
        assert (event.recipient_id, event.body) == (queue.recipient_id, b"after")
        await recipient.ack(queue, event.msg_id)
        assert (await _event(notified, NotificationEvent)).notifier_id == creds.notifier_id
        await sender.send(queue.sender_id, b"kept")
    link_id, sender_id = link
    for c in clients:
        assert await c.command(link_id, LGET()) == LNK(sender_id, b"fixed", b"user")


async def _move_through_counts(config: RouterConfig, tmp_path) -> None:
    data = config.data_dir
    async with serving(config, 1) as clients:
        queues, notifiers, link = await _populate(clients)
        blocked_queue = await clients[0].create_queue(snd_secure=False)
    BlockedQueues(data).add(blocked_queue.recipient_id, "spam")
    pending = [b"before 0", b"before 1"]
    for before, after in ((1, 2), (2, 3), (3, 1)):
        moved = await move_workers(data, after, settings=_settings(config))
        # The postgres store is shared: its messages stay where they are.
        copied = 0 if config.store == "postgres" else QUEUES * len(pending)
        assert (moved.queues, moved.messages) == (QUEUES + 2, copied)
        assert moved.backup is not None and moved.backup.name.startswith(f"workers-{before}.old-")
        if after > 1:
            # Ids minted at random (one process) or for another count: some need a home.
            table = read_owner_exceptions(data, after)
            assert len(table) == moved.exceptions > 0
            if config.store != "postgres":  # whose workers keep the directory itself
                blocked = [BlockedQueues(worker_dir(data, i)).reasons for i in range(after)]
                assert sum(len(b) for b in blocked) == 1
        else:
            assert not (data / OWNER_EXCEPTIONS_FILE).exists()
            assert BlockedQueues(data).reasons == {blocked_queue.recipient_id: "spam"}
        with pytest.raises(ConfigError, match=f"workers-move --data-dir {data} --workers "
                                              f"{before}"):
            check_worker_count(replace(config, workers=before))
        async with serving(config, after) as clients:
            await _check_every_id(clients, queues, notifiers, link, pending)
            for c in clients:  # its mark went to its home, wherever the SUB lands
                with pytest.raises(SMPError, match="BLOCKED"):
                    await c.subscribe(blocked_queue)
        pending = [b"kept"]


def _settings(config: RouterConfig) -> dict[str, object]:
    return dict(config.store_options or {})


@pytest.mark.parametrize("kind", ["memory", "journal", "sqlite"])
async def test_queues_move_from_one_process_to_two_then_three_then_one(tmp_path, kind):
    await _move_through_counts(
        RouterConfig(host="127.0.0.1", port=0, store=kind, data_dir=tmp_path / "d"), tmp_path)


async def test_a_postgres_router_changes_its_count_with_its_exceptions(tmp_path):
    data = tmp_path / "d"
    await _move_through_counts(RouterConfig(
        host="127.0.0.1", port=0, **router_store_settings("postgres", data)), tmp_path)


def test_the_command_line_moves_and_keeps_the_old_shares(tmp_path, capsys):
    data = tmp_path / "d"
    data.mkdir()
    (data / "STORE_KIND").write_text("journal\n")
    assert main(["workers-move", "--data-dir", str(data), "--workers", "2"]) == 0
    shown = capsys.readouterr()
    assert "0 queues and 0 messages moved from 1 to 2 workers" in shown.out
    assert "queues [" in shown.err  # the progress, on stderr
    assert (data / "WORKERS").read_text() == "2\n"
    assert (data / "worker-1" / "STORE_KIND").read_text() == "journal\n"
    backups = list(data.glob("workers-1.old-*"))
    assert len(backups) == 1 and (backups[0] / "STORE_KIND").exists()
    assert main(["workers-move", "--data-dir", str(data), "--workers", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with lock_data_dir(data):  # as a running router holds it
        assert main(["workers-move", "--data-dir", str(data), "--workers", "3"]) == 2
    err = capsys.readouterr().err
    assert f"data directory {data} is in use by process {os.getpid()}" in err
    assert (data / "WORKERS").read_text() == "2\n"
    # A memory store whose last run did not save: refused in one line, nothing moved.
    unsaved = tmp_path / "unsaved"
    (unsaved / "memory-store").mkdir(parents=True)
    (unsaved / "STORE_KIND").write_text("memory\n")
    (unsaved / "memory-store" / "snapshot.reserve").write_bytes(b"")
    assert main(["workers-move", "--data-dir", str(unsaved), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "did not finish saving" in err and err.count("\n") == 1
    assert sorted(p.name for p in unsaved.iterdir()) == ["STORE_KIND", "memory-store",
                                                         "router.lock"]


async def test_a_move_cut_short_in_its_switch_is_refused_then_finished(tmp_path, monkeypatch):
    config = RouterConfig(host="127.0.0.1", port=0, store="journal", data_dir=tmp_path / "d")
    async with serving(config, 1) as clients:
        queues, notifiers, link = await _populate(clients)
    renames = []

    def crash_on_the_third(source, target):
        if len(renames) == 2:
            raise OSError("the machine stopped")
        renames.append(target)
        replace_durably(source, target)

    monkeypatch.setattr("router.server.workers.move.replace_durably", crash_on_the_third)
    with pytest.raises(OSError, match="stopped"):
        await move_workers(config.data_dir, 2)
    for workers in (1, 2):
        with pytest.raises(ConfigError, match="in the middle of a move to 2 workers: finish "
                                              "it with smp-router workers-move .* --workers 2"):
            check_worker_count(replace(config, workers=workers))
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="finish it first"):
        await move_workers(config.data_dir, 3)
    moved = await move_workers(config.data_dir, 2)
    assert moved.queues == QUEUES + 1
    async with serving(config, 2) as clients:
        await _check_every_id(clients, queues, notifiers, link, [b"before 0", b"before 1"])


async def test_a_services_queues_move_with_its_one_id(tmp_path):
    """A service of one process (a random id) moved to two workers: each worker finds its
    record, so its sessions on either keep the id, and one SUBS covers the queues of
    both homes (docs/workers.md#another-count-of-workers)."""
    config = RouterConfig(host="127.0.0.1", port=0, store="sqlite", data_dir=tmp_path / "d")
    # Random ids: the queues' homes are both workers but for a chance of 2 in 65,536.
    cert = ServiceCertificate(*chain_of_two().files())
    async with (
        running_router(store="sqlite", data_dir=config.data_dir) as router,
        open_client(router.address) as sender,
    ):
        async with open_client(router.address, service_cert=cert) as creator:
            service_id = creator.service_id
            queues = [await creator.create_queue(snd_secure=False) for _ in range(SERVICE_QUEUES)]
        for n, queue in enumerate(queues):
            await sender.send(queue.sender_id, b"waiting %d" % n)
    await move_workers(config.data_dir, 2)
    by_id = {q.recipient_id: q for q in queues}
    table = read_owner_exceptions(config.data_dir, 2)
    homes = {table.get(q.recipient_id, Ownership(2).owner_of(q.recipient_id)) for q in queues}
    assert homes == {0, 1}, "every queue in one worker: nothing across workers tested"
    check_worker_count(replace(config, workers=2))
    async with workers_in_process(config, 2) as infos:
        for info in infos:
            async with open_client(info.address, service_cert=cert) as service:
                assert service.service_id == service_id
                for queue in queues:
                    service.add_queue(queue)
                assert await service.subscribe_service() == SERVICE_QUEUES
                assert service.service_figures == (SERVICE_QUEUES, queue_ids_hash(by_id))
                bodies = set()
                for _ in range(SERVICE_QUEUES):
                    event = await _event(service, MessageEvent)
                    bodies.add(event.body)
                    if info is infos[-1]:
                        await service.ack(by_id[event.recipient_id], event.msg_id)
                assert bodies == {b"waiting %d" % n for n in range(SERVICE_QUEUES)}
                await _event(service, AllReceivedEvent)


async def test_the_command_line_moves_a_routers_queues_to_its_workers(tmp_path):
    """`serve` of one process, `workers-move`, `serve --workers 2`: the workers load the
    exceptions (a SEND by a sender id of the other worker than its queue's home, from
    connections landing on either, reaches the queue's subscriber)."""
    data = tmp_path / "d"
    async with supervised(data, "--store", "journal", workers=1) as router:
        async with open_client(router.address) as c:
            queues = [await c.create_queue(snd_secure=False) for _ in range(QUEUES)]
            for queue in queues:
                await c.send(queue.sender_id, b"before")
    code, out, err = await run("workers-move", "--data-dir", str(data), "--workers", "2")
    assert code == 0, err
    assert f"{QUEUES} queues and {QUEUES} messages moved from 1 to 2 workers" in out
    table = read_owner_exceptions(data, 2)
    assert any(q.sender_id in table for q in queues)
    async with supervised(data, "--store", "journal", workers=2) as router:
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(open_client(router.address))
                       for _ in range(4)]
            for i, queue in enumerate(queues):
                recipient, sender = clients[i % 4], clients[(i + 1) % 4]
                await recipient.subscribe(queue)
                event = await _event(recipient, MessageEvent, queue.recipient_id)
                assert event.body == b"before"
                await recipient.ack(queue, event.msg_id)
                await sender.send(queue.sender_id, b"after")
                event = await _event(recipient, MessageEvent, queue.recipient_id)
                assert (event.recipient_id, event.body) == (queue.recipient_id, b"after")
                await recipient.ack(queue, event.msg_id)
