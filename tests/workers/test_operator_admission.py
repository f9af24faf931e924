"""The caps on connections hold for the router as a whole with several workers
(docs/workers.md#one-router-to-the-operator): the supervisor counts every worker's
connections, whichever worker accepts; the pending pool is one pool; the NEW
budgets are the supervisor's."""

from __future__ import annotations

import os
import secrets
import signal
from contextlib import AsyncExitStack

import trio
from operated import control, http_get, operated, sample, workers_of

from router.client import open_client
from router.server.edge.admission import Admission, AdmissionLimits, Refused
from router.server.workers.admission import SHARE_SLACK, SharedAdmission, serve_admission


def local_ticket(key: str = "10.0.0.1"):
    """A worker's own ticket (its descriptor cap only), as its listener makes one."""
    return Admission(AdmissionLimits(1000, 1000, 1000, None)).admit(key)


async def test_two_workers_asking_one_admission_share_its_caps():
    group = secrets.token_hex(8)
    limits = AdmissionLimits(max_pending=3, max_pending_per_address=3, max_connections=100,
                             max_connections_per_address=3)
    async with trio.open_nursery() as nursery:
        admission: Admission = await nursery.start(serve_admission, group, limits)
        first, second = SharedAdmission(group), SharedAdmission(group)
        await nursery.start(first.run)
        await nursery.start(second.run)
        a1 = await first.admit("10.0.0.1", local_ticket())
        a2 = await first.admit("10.0.0.1", local_ticket())
        b1 = await second.admit("10.0.0.1", local_ticket())
        assert (admission.open, admission.pending) == (3, 3)
        # The fourth from the address, in either worker: over the per-address cap.
        for worker in (first, second):
            refused = local_ticket()
            try:
                await worker.admit("10.0.0.1", refused)
            except Refused as e:
                assert str(e) == "too many connections from this address"
            else:
                raise AssertionError("a fourth connection from one address was admitted")
            assert not refused.pending  # the worker's own ticket closed with it
        for ticket in (a1, a2, b1):
            ticket.established()
        b1.close()
        await trio.testing.wait_all_tasks_blocked()
        assert (admission.open, admission.pending) == (2, 0)
        b2 = await second.admit("10.0.0.1", local_ticket())  # room again, in either worker
        # The pool (3) full of the address's pending ones...
        b2.close()
        a1.close()
        a2.close()
        crowd = [await first.admit("10.0.0.9", local_ticket("10.0.0.9")) for _ in range(3)]
        assert admission.pending == 3
        # ... drops the oldest for a newcomer of a less represented address, in the
        # worker that holds it.
        newcomer = await second.admit("10.0.0.2", local_ticket("10.0.0.2"))
        await trio.testing.wait_all_tasks_blocked()
        assert crowd[0].scope.cancel_called and not crowd[1].scope.cancel_called
        assert newcomer.pending and not newcomer.scope.cancel_called
        assert (admission.pending, admission.evicted) == (3, 1)
        nursery.cancel_scope.cancel()


async def test_a_dead_workers_connections_are_forgotten():
    group = secrets.token_hex(8)
    limits = AdmissionLimits(10, 10, 100, 2)
    async with trio.open_nursery() as nursery:
        admission: Admission = await nursery.start(serve_admission, group, limits)
        survivor = SharedAdmission(group)
        await nursery.start(survivor.run)
        async with trio.open_nursery() as dying:
            dead = SharedAdmission(group)
            await dying.start(dead.run)
            await dead.admit("10.0.0.1", local_ticket())
            await dead.admit("10.0.0.1", local_ticket())
            assert admission.open == 2
            try:
                await survivor.admit("10.0.0.1", local_ticket())
            except Refused:
                pass
            else:
                raise AssertionError("a third connection from one address was admitted")
            dying.cancel_scope.cancel()  # its link ends, as a dead worker's does
        with trio.fail_after(10):
            while admission.open:
                await trio.sleep(0.01)
        await survivor.admit("10.0.0.1", local_ticket())
        nursery.cancel_scope.cancel()


async def test_each_admission_tells_the_worker_its_share():
    """The supervisor's answer carries the router's open connections and the workers
    accepting now: a worker is over its share past SHARE_SLACK, and alone it never is
    (the listener then leaves the backlog to the others: docs/workers.md#the-listener)."""
    group = secrets.token_hex(8)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admission, group, AdmissionLimits(1000, 1000, 1000, 1000))
        first = SharedAdmission(group, 2)
        await nursery.start(first.run)
        async with trio.open_nursery() as other_worker:
            second = SharedAdmission(group, 2)
            await other_worker.start(second.run)
            # Before any admission: the count the router was started with, none open.
            assert second.over_share(0, SHARE_SLACK * 2 + 1)
            assert not second.over_share(0, SHARE_SLACK * 2)
            for _ in range(10):
                await first.admit("10.0.0.1", local_ticket())
            assert (first.router_open, first.workers) == (10, 2)
            # All 10 of the router's in this worker: half of 10 + k, plus the slack.
            assert not first.over_share(10)
            assert not first.over_share(10, SHARE_SLACK * 2 - 10)
            assert first.over_share(10, SHARE_SLACK * 2 - 9)
            await second.admit("10.0.0.1", local_ticket())
            assert (second.router_open, second.workers) == (11, 2)
            other_worker.cancel_scope.cancel()  # its link ends, as a dead worker's does
        with trio.fail_after(10):
            while True:
                await first.admit("10.0.0.1", local_ticket())
                if first.workers == 1:
                    break
                await trio.sleep(0.01)
        assert not first.over_share(first.router_open, 1000)
        nursery.cancel_scope.cancel()


async def refused_answer(port: int) -> str:
    """A plain request's answer: the 503's reason of a refused connection, else its status."""
    status, body = await http_get(port, "/?format=json")
    return body.decode().strip() if status == 503 else str(status)


async def test_a_per_address_cap_holds_whichever_worker_accepts(tmp_path):
    cap = 4
    async with operated(tmp_path, "--store", "memory",
                        "--max-connections-per-address", str(cap)) as r:
        port = int(r.address.rsplit(":", 1)[1])
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(open_client(r.address))
                       for _ in range(cap)]
            (listed,) = await control(r.control_port, "clients")
            if len(set(workers_of(listed))) == 1:
                # All in one worker: one of them again while that worker cannot accept,
                # so that the other one takes it.
                busy = r.worker_pids()[workers_of(listed)[0]]
                await clients.pop().aclose()
                await wait_admitted(r.metrics_port, cap - 1)
                os.kill(busy, signal.SIGSTOP)
                try:
                    clients.append(await stack.enter_async_context(open_client(r.address)))
                finally:
                    os.kill(busy, signal.SIGCONT)
                (listed,) = await control(r.control_port, "clients")
            assert set(workers_of(listed)) == {0, 1}, listed
            # Each worker holds fewer than the cap: the cap is the router's.
            for _ in range(4):
                assert await refused_answer(port) == "too many connections from this address"
            await clients[0].aclose()
            await wait_admitted(r.metrics_port, cap - 1)
            assert await refused_answer(port) == "200"


async def wait_admitted(metrics_port: int, count: int) -> None:
    """Until the router's caps count `count` open connections."""
    with trio.fail_after(30):
        while True:
            _, page = await http_get(metrics_port, "/metrics")
            if sample(page.decode(), "smp_router_admitted_connections") == count:
                return
            await trio.sleep(0.05)


async def test_the_pending_pool_is_one_for_the_router(tmp_path):
    pool = 4
    async with operated(tmp_path, "--store", "memory", "--max-pending", str(pool),
                        "--max-pending-per-address", str(pool), "--upgrade-timeout", "60") as r:
        port = int(r.address.rsplit(":", 1)[1])
        silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(pool)]
        try:
            with trio.fail_after(30):
                while True:
                    _, page = await http_get(r.metrics_port, "/metrics")
                    if sample(page.decode(), "smp_router_pending_connections") == pool:
                        break
                    await trio.sleep(0.05)
            for _ in range(4):  # whichever worker accepts it
                assert await refused_answer(port) == \
                    "too many connections being opened from this address"
        finally:
            for stream in silent:
                await stream.aclose()
        with trio.fail_after(30):
            while await refused_answer(port) != "200":
                await trio.sleep(0.05)


async def test_the_new_budget_of_the_router_holds_over_the_workers(tmp_path):
    burst = 4
    async with operated(tmp_path, "--store", "memory", "--new-queues-per-second-total",
                        "0.001", "--new-queues-burst-total", str(burst)) as r:
        created = refused = 0
        for _ in range(3):
            async with open_client(r.address) as client:
                for _ in range(burst):
                    try:
                        await client.create_queue()
                        created += 1
                    except Exception as e:  # noqa: BLE001 - the refusal is checked below
                        assert "NEW_RATE_LIMIT" in repr(e), e
                        refused += 1
        # Two workers borrowing from one budget: never more than the router's burst.
        assert 0 < created <= burst and created + refused == 3 * burst
        (stats,) = await control(r.control_port, "stats")
        assert f"new_queues_rate_limited: {refused}" in stats
