"""A service's subscriptions with two workers (docs/workers.md#service-subscriptions):
its queues are in both, one service id for its certificate in either, one SOKS with
the router's figures, the walk's messages from both and one ALLS after them, one ENDS
with the router's figures on a takeover."""

from __future__ import annotations

import trio

from bench.service_client import chain_of_two
from router.client import (
    AllReceivedEvent,
    MessageEvent,
    ServiceCertificate,
    ServiceEndEvent,
    open_client,
)
from router.protocol.ids_hash import queue_ids_hash
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers.in_process import workers_in_process

OWNER = Ownership(2, 0).owner_of


async def _event(client, timeout: float = 10):
    with trio.fail_after(timeout):
        return await client.next_event()


async def test_a_service_with_queues_in_both_workers_is_one_service(tmp_path) -> None:
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path / "d",
                          end_batch_interval=0.02)
    cert = ServiceCertificate(*chain_of_two().files())
    async with workers_in_process(config) as (w0, w1), open_client(w0.address) as sender:
        queues = []
        service_ids = set()
        for worker, n in ((w0, 3), (w1, 2)):  # NEW in a service's session joins it
            async with open_client(worker.address, service_cert=cert) as creator:
                service_ids.add(creator.service_id)
                queues += [await creator.create_queue(subscribe=True, snd_secure=False)
                           for _ in range(n)]
        assert len(service_ids) == 1 and None not in service_ids
        assert sorted(OWNER(q.recipient_id) for q in queues) == [0, 0, 0, 1, 1]
        for n, queue in enumerate(queues):
            await sender.send(queue.sender_id, b"waiting %d" % n)
        by_id = {q.recipient_id: q for q in queues}

        async with open_client(w1.address, service_cert=cert) as first:
            for queue in queues:
                first.add_queue(queue)
            assert await first.subscribe_service() == 5
            assert first.service_figures == (5, queue_ids_hash(by_id))
            bodies = set()
            for _ in range(5):  # the walks of both workers, then one ALLS
                event = await _event(first)
                assert isinstance(event, MessageEvent), event
                bodies.add(event.body)
                await first.ack(by_id[event.recipient_id], event.msg_id)
            assert bodies == {b"waiting %d" % n for n in range(5)}
            assert isinstance(await _event(first), AllReceivedEvent)

            async with open_client(w0.address, service_cert=cert) as second:
                for queue in queues:
                    second.add_queue(queue)
                assert await second.subscribe_service() == 5
                ends = await _event(first)
                assert ends == ServiceEndEvent(first.service_id, 5)
                assert isinstance(await _event(second), AllReceivedEvent)
                # The queues of both workers now deliver to the second connection.
                for queue in (queues[0], queues[4]):
                    await sender.send(queue.sender_id, b"new")
                    event = await _event(second)
                    assert isinstance(event, MessageEvent) and event.body == b"new"
                    assert event.recipient_id == queue.recipient_id
                # One ENDS for the router: nothing more came to the first.
                with trio.move_on_after(0.3):
                    extra = await first.next_event()
                    raise AssertionError(f"the first connection got {extra}")


async def test_nsubs_counts_the_notifiers_of_both_workers(tmp_path) -> None:
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path / "d")
    cert = ServiceCertificate(*chain_of_two().files(), role=b"N")
    async with (
        workers_in_process(config) as (w0, w1),
        open_client(w0.address) as r0,
        open_client(w1.address) as r1,
        open_client(w1.address, service_cert=cert) as notifier,
    ):
        queues = [await r.create_queue() for r in (r0, r0, r1)]
        assert sorted(OWNER(q.recipient_id) for q in queues) == [0, 0, 1]
        notifier_ids = []
        for queue in queues:
            creds = await r0.enable_notifications(queue)
            await notifier.subscribe_notifications(creds)  # joins the service
            notifier_ids.append(creds.notifier_id)
        assert await notifier.subscribe_service_notifications() == 3
        assert notifier.service_figures == (3, queue_ids_hash(notifier_ids))
        async with open_client(w0.address, service_cert=cert) as taker:
            assert await taker.subscribe_service_notifications() == 3
            assert taker.service_figures == (3, queue_ids_hash(notifier_ids))
            assert await _event(notifier) == ServiceEndEvent(notifier.service_id, 3)
