"""The suites' router at `--workers 2` (tests/worker_count.py, docs/testing.md): one
address whose clients land on both workers, a message from one to the other; with
the shared listener, the router's caps on connections over both."""

from __future__ import annotations

from functools import partial

import trio
from worker_count import WORKERS_VARIABLE, serve_router_under_test

from router.client import open_client
from router.server import RouterConfig
from router.server.core.ownership import Ownership


async def test_clients_of_the_one_address_land_on_both_workers(nursery, monkeypatch):
    monkeypatch.setenv(WORKERS_VARIABLE, "2")
    info = await nursery.start(serve_router_under_test,
                               RouterConfig(host="127.0.0.1", port=0, store="memory"))
    owner_of = Ownership(2, 0).owner_of
    with trio.fail_after(20):
        async with open_client(info.address) as recipient, open_client(info.address) as sender:
            queue = await recipient.create_queue(subscribe=True)
            await sender.send(queue.sender_id, b"across")
            assert (await recipient.next_event()).body == b"across"
            # a NEW belongs to the worker it landed on: one queue made on each connection
            other = await sender.create_queue()
            assert {owner_of(queue.recipient_id), owner_of(other.recipient_id)} == {0, 1}
            landed = [info.router.connection_for_session(c.session_id)
                      for c in (recipient, sender)]
            assert all(conn is not None for conn in landed)
            assert info.router.statistics().connections == 2  # the shadow not counted


async def test_the_workers_of_a_shared_listener_keep_the_routers_caps(nursery, monkeypatch):
    """`shared_listener` (the edge suite's): both workers accept from one socket, and
    the cap per address counts the connections of both."""
    monkeypatch.setenv(WORKERS_VARIABLE, "2")
    cap = 20  # enough that a worker over its share leaves some to the other
    config = RouterConfig(host="127.0.0.1", port=0, store="memory",
                          max_connections_per_address=cap)
    info = await nursery.start(partial(serve_router_under_test, config, shared_listener=True))
    edge = info.listener
    held = [await trio.open_tcp_stream("127.0.0.1", info.port) for _ in range(cap)]
    with trio.fail_after(10):
        while edge.admission.open_from("127.0.0.1") < cap:
            await trio.sleep(0.01)
    assert all(worker.open_connections > 0 for worker in edge.listeners)
    one_more = await trio.open_tcp_stream("127.0.0.1", info.port)
    with trio.fail_after(10):
        while edge.refused < 1:
            await trio.sleep(0.01)
    for stream in [*held, one_more]:
        await stream.aclose()
    with trio.fail_after(10):
        await edge.wait_connections_at_most(0)
