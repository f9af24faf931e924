"""Commands handed to the queue's worker (docs/workers.md#hand-offs-in-blocks), through
the real command line with two workers: a client's connection lands on either worker,
and every command on a queue runs in the queue's owner, whichever that is."""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack

import pytest
import trio
from supervised import supervised

from bench.service_client import chain_of_two
from router.client import (
    ConnectionClosed,
    EndEvent,
    MessageEvent,
    ServiceCertificate,
    SMPError,
    open_client,
)
from router.server.core.ownership import Ownership

OWNER = Ownership(2, 0).owner_of


async def clients_on_each_worker(stack: AsyncExitStack, address: str):
    """A client whose connection landed on worker 0 and one on worker 1, each with a
    queue of its own worker's (NEW runs in the connection's worker)."""
    found: dict[int, tuple] = {}
    for _ in range(80):
        client = await stack.enter_async_context(open_client(address))
        queue = await client.create_queue(snd_secure=False)
        found.setdefault(OWNER(queue.recipient_id), (client, queue))
        if len(found) == 2:
            return found[0], found[1]
    raise AssertionError("every connection landed on one worker")


async def test_a_sender_on_one_worker_reaches_a_recipient_on_the_other(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory") as r, AsyncExitStack() as stack:
        (c0, q0), (c1, q1) = await clients_on_each_worker(stack, r.address)
        await c0.subscribe(q0)
        await c1.subscribe(q1)
        # c1's SEND to worker 0's queue is handed to worker 0, whose MSG comes back.
        for n in range(5):
            await c1.send(q0.sender_id, b"to-0 %d" % n)
            await c0.send(q1.sender_id, b"to-1 %d" % n)
        for client, queue, prefix in ((c0, q0, b"to-0"), (c1, q1, b"to-1")):
            for n in range(5):
                with trio.fail_after(10):
                    event = await client.next_event()
                assert isinstance(event, MessageEvent) and event.body == b"%s %d" % (prefix, n)
                await client.ack(queue, event.msg_id)


async def test_a_subscriber_on_another_worker_gets_the_queue_in_order_and_displaces(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory") as r, AsyncExitStack() as stack:
        (c0, q0), (c1, _) = await clients_on_each_worker(stack, r.address)
        await c0.subscribe(q0)
        # A subscriber on worker 1 takes over worker 0's queue: the first gets END.
        await c1.subscribe(q0)
        with trio.fail_after(10):
            end = await c0.next_event()
        assert isinstance(end, EndEvent) and end.recipient_id == q0.recipient_id
        # The sender is on worker 0 and the subscriber on worker 1: one MSG at a time,
        # in the order sent, each after the ACK of the one before.
        for n in range(10):
            await c0.send(q0.sender_id, b"m%d" % n)
        for n in range(10):
            with trio.fail_after(10):
                event = await c1.next_event()
            assert isinstance(event, MessageEvent) and event.body == b"m%d" % n
            await c1.ack(q0, event.msg_id)
        # GET and DEL from worker 1 run in worker 0 as well.
        await c0.send(q0.sender_id, b"last")
        with trio.fail_after(10):
            event = await c1.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"last"
        await c1.ack(q0, event.msg_id)
        await c1.delete(q0)
        with pytest.raises(SMPError, match="AUTH"):
            await c0.send(q0.sender_id, b"gone")


async def test_get_on_another_worker_reads_the_owner_queue(tmp_path):
    async with supervised(tmp_path / "data", "--store", "memory") as r, AsyncExitStack() as stack:
        (c0, q0), (c1, _) = await clients_on_each_worker(stack, r.address)
        await c1.send(q0.sender_id, b"first")
        got = await c1.get(q0)
        assert got is not None and got.body == b"first"
        await c1.ack(q0, got.msg_id)
        assert await c1.get(q0) is None


async def test_a_worker_killed_closes_the_connections_with_queues_in_it(tmp_path):
    async with supervised(tmp_path / "data", "--store", "journal") as r, AsyncExitStack() as stack:
        (c0, q0), (c1, q1) = await clients_on_each_worker(stack, r.address)
        await c1.subscribe(q0)  # worker 1's client holds a subscription in worker 0
        first, _ = r.worker_pids()
        os.kill(first, signal.SIGKILL)
        # Its subscription is gone with worker 0: worker 1 closes the connection, and the
        # client, reconnecting, subscribes again in the restarted worker 0.
        with trio.fail_after(20), pytest.raises(ConnectionClosed):
            while True:
                await c1.next_event()
        await r.until_logged(lambda log: "worker 0 is serving again" in log, "the restart")
        again = await stack.enter_async_context(open_client(r.address))
        await again.subscribe(q0)
        async with open_client(r.address) as sender:
            await sender.send(q0.sender_id, b"after the restart")
        with trio.fail_after(10):
            event = await again.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"after the restart"


async def test_the_memory_snapshots_of_every_worker_come_back_after_a_restart(tmp_path):
    data = tmp_path / "data"
    async with supervised(data, "--store", "memory") as r, AsyncExitStack() as stack:
        (c0, q0), (c1, q1) = await clients_on_each_worker(stack, r.address)
        await c1.send(q0.sender_id, b"kept in worker 0")
        await c0.send(q1.sender_id, b"kept in worker 1")
    assert (data / "worker-0" / "memory-store").is_dir()
    assert (data / "worker-1" / "memory-store").is_dir()
    async with supervised(data, "--store", "memory") as r, open_client(r.address) as client:
        for queue, body in ((q0, b"kept in worker 0"), (q1, b"kept in worker 1")):
            event = await client.get(queue)
            assert event is not None and event.body == body


async def test_a_service_whose_sessions_land_on_both_workers_is_one_service(tmp_path):
    """Through the command line: the workers make one service id for a certificate from
    the router's identity, and SUBS counts the queues of both."""
    cert = ServiceCertificate(*chain_of_two().files())
    async with supervised(tmp_path / "data", "--store", "journal") as r, AsyncExitStack() as stack:
        owners: dict[int, int] = {}
        service_ids = set()
        for _ in range(80):
            creator = await stack.enter_async_context(open_client(r.address, service_cert=cert))
            service_ids.add(creator.service_id)
            queue = await creator.create_queue(subscribe=True, snd_secure=False)
            owner = OWNER(queue.recipient_id)
            owners[owner] = owners.get(owner, 0) + 1
            if len(owners) == 2:
                break
        assert len(owners) == 2, "every connection landed on one worker"
        assert len(service_ids) == 1
        async with open_client(r.address, service_cert=cert) as holder:
            assert holder.service_id in service_ids
            assert await holder.subscribe_service() == sum(owners.values())
