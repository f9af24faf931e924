"""Service subscriptions at the router: SUBS catch-up and ALLS, takeover with ENDS, NSUBS.

The services are by certificate (docs/protocol.md#client-service) over the in-memory
pair (smp_session: the router's end carries the chain a TLS edge would have verified).
"""

from __future__ import annotations

from collections import Counter

import pytest
import trio
from router_scale import scaled
from smp_session import Queue, Reply, Session, connect

from bench.service_client import ServiceCert, self_signed_cert
from router.protocol import crypto
from router.protocol.types import (
    ACK,
    ALLS,
    AUTH,
    DEL,
    END,
    ENDS,
    ERR,
    MSG,
    NMSG,
    NO_MSG,
    NSUB,
    NSUBS,
    OK,
    SEND,
    SOK,
    SUB,
    SUBS,
)
from router.server import SINGLE_TASK, Router
from router.server.core import services as services_core

# The receive loop; and the delivery task, only while it has work (a catch-up walk).
IDLE_CONNECTION_TASKS, BUSY_CONNECTION_TASKS = 1, 2


def body(i: int) -> bytes:
    return b"message %d" % i


def sends(queues: list[Queue], bodies: list[bytes]) -> list:
    return [(q.sender_id, SEND(b"F", b), None) for q, b in zip(queues, bodies, strict=True)]


async def service_queues(router: Router, cert: ServiceCert, n: int) -> list[Queue]:
    """`n` queues created with subMode S by a connection of the service: all associated."""
    async with connect(router, service=cert) as creator:
        return await creator.create_queues(n, subscribe=True)


def ends_count(event: Reply) -> int:
    assert isinstance(event.response, ENDS), event
    return event.response.count


async def catch_up(client: Session, router: Router) -> tuple[int, list[Reply], set[int]]:
    """SUBS, then every event up to ALLS; also the connection's task counts seen meanwhile."""
    assert await client.no_more_events()  # an answer: the router serves the connection now
    conn = router.connection_for_session(client.session_id)
    assert conn is not None
    task_counts = {conn.task_count()}
    count = await client.service_command(SUBS())
    messages: list[Reply] = []
    while True:
        event = await client.next_event()
        task_counts.add(conn.task_count())
        if event.response == ALLS():
            return count, messages, task_counts
        assert isinstance(event.response, MSG), event
        messages.append(event)


def opened(by_queue: dict[bytes, Queue], event: Reply) -> bytes:
    assert isinstance(event.response, MSG), event
    return by_queue[event.entity_id].open(event.response).body


async def check_catch_up_and_takeover(
    router: Router, delivery: str, n_queues: int, n_full: int
) -> None:
    cert = self_signed_cert()
    queues = await service_queues(router, cert, n_queues)
    by_queue = {q.recipient_id: q for q in queues}
    full = queues[:n_full]
    async with connect(router) as sender:
        assert set(await sender.commands(sends(full, [body(i) for i in range(n_full)]))) == {OK()}

    async with connect(router, service=cert) as first:
        count, messages, task_counts = await catch_up(first, router)
        assert count == n_queues
        assert Counter(opened(by_queue, m) for m in messages) == Counter(
            body(i) for i in range(n_full)
        )
        if delivery == SINGLE_TASK:
            # the catch-up added no task of its own: it runs in the delivery task
            assert max(task_counts) <= BUSY_CONNECTION_TASKS
        else:  # one per queue with a message on its way, none for the idle ones
            assert IDLE_CONNECTION_TASKS + n_full <= max(task_counts)
            assert max(task_counts) <= BUSY_CONNECTION_TASKS + n_full
        assert await first.no_more_events()

        # The first connection acknowledges half; the rest stays in flight there.
        acked, unacked = messages[: n_full // 2], messages[n_full // 2 :]
        acks = [(m.entity_id, ACK(m.response.msg_id), by_queue[m.entity_id].rcv_seed)
                for m in acked]
        assert set(await first.commands(acks)) <= {OK()}

        async with connect(router, service=cert) as second:
            count, moved, _ = await catch_up(second, router)
            assert count == n_queues
            ended = await first.next_event()
            assert (ended.entity_id, ends_count(ended)) == (first.service_id, n_queues)
            assert sorted((m.entity_id, m.response.msg_id) for m in moved) == sorted(
                (m.entity_id, m.response.msg_id) for m in unacked
            )
            assert await second.no_more_events()
            # the queue is the second connection's now: the first cannot acknowledge it
            stale = unacked[0]
            q = by_queue[stale.entity_id]
            assert await first.recipient(q, ACK(stale.response.msg_id)) == ERR(NO_MSG)
            assert await first.no_more_events()


# 10,000 queues of which 3,000 hold a message. The design this router replaces
# (a task per queue) and the durable stores take several times as long, so they
# run at that size with the stress tests and at 2,000 / 600 otherwise (a quarter of
# that on the durable stores, `scaled`).
FULL_SCALE, SMALL_SCALE = (10_000, 3_000), (2_000, 600)


@pytest.mark.scale
async def test_subs_delivers_every_waiting_message_once_through_the_delivery_task_then_alls(
    router_factory, delivery, store_kind
):
    router = await router_factory()
    full = delivery == SINGLE_TASK and store_kind == "memory"
    n_queues, n_full = (scaled(store_kind, n) for n in (FULL_SCALE if full else SMALL_SCALE))
    with trio.fail_after(300):
        await check_catch_up_and_takeover(router, delivery, n_queues, n_full)


@pytest.mark.stress
async def test_subs_delivers_3000_waiting_messages_of_10000_queues_once_in_every_setting(
    router_factory, delivery, store_kind
):
    router = await router_factory()
    with trio.fail_after(600):
        await check_catch_up_and_takeover(router, delivery, *FULL_SCALE)


@pytest.mark.scale
async def test_messages_sent_while_subs_catches_up_are_delivered_exactly_once(
    router_factory, store_kind
):
    # A small outbox keeps the catch-up waiting on the client, so SENDs land meanwhile.
    router = await router_factory(send_queue_size=2)
    cert = self_signed_cert()
    n = scaled(store_kind, 1000)
    part = n * 3 // 10
    queues = await service_queues(router, cert, n)
    by_queue = {q.recipient_id: q for q in queues}
    waiting, empty = queues[:part], queues[part:2 * part]
    with trio.fail_after(60):
        async with connect(router) as sender, connect(router, service=cert) as service:
            before = sends(waiting, [b"before %d" % i for i in range(part)])
            assert set(await sender.commands(before)) == {OK()}
            during = sends(empty, [b"during %d" % i for i in range(part)])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.commands, during)
                assert await service.service_command(SUBS()) == n
                received: list[bytes] = []
                alls = 0
                while alls == 0 or len(received) < 2 * part:
                    event = await service.next_event()
                    if event.response == ALLS():
                        alls += 1
                    else:
                        received.append(opened(by_queue, event))
            assert await service.no_more_events()
            assert alls == 1
            assert Counter(received) == Counter(
                [b"before %d" % i for i in range(part)] + [b"during %d" % i for i in range(part)]
            )


async def test_after_a_takeover_new_messages_go_to_the_new_service_connection(router):
    cert = self_signed_cert()
    [q] = await service_queues(router, cert, 1)
    with trio.fail_after(10):
        async with connect(router) as sender, connect(router, service=cert) as first, \
                connect(router, service=cert) as second:
            assert await first.service_command(SUBS()) == 1
            assert (await first.next_event()).response == ALLS()
            assert await second.service_command(SUBS()) == 1
            assert ends_count(await first.next_event()) == 1
            assert (await second.next_event()).response == ALLS()
            await sender.send(q.sender_id, b"after the takeover")
            _, pushed = await second.next_message(q)
            assert pushed.body == b"after the takeover"
            assert await first.no_more_events()


async def test_subs_again_on_the_same_connection_delivers_what_is_waiting_and_not_in_flight(
    router,
):
    cert = self_signed_cert()
    q1, q2 = await service_queues(router, cert, 2)
    with trio.fail_after(10):
        async with connect(router) as sender, connect(router, service=cert) as service:
            await sender.send(q1.sender_id, b"one")
            assert await service.service_command(SUBS()) == 2
            first, opened_first = await service.next_message(q1)
            assert opened_first.body == b"one"
            assert (await service.next_event()).response == ALLS()
            await sender.send(q1.sender_id, b"behind one")
            await sender.send(q2.sender_id, b"two")
            _, pushed = await service.next_message(q2)  # pushed live
            assert pushed.body == b"two"
            assert await service.service_command(SUBS()) == 2
            assert (await service.next_event()).response == ALLS()  # nothing new to send
            assert await service.recipient(q1, ACK(first.msg_id)) == OK()
            _, behind = await service.next_message(q1)
            assert behind.body == b"behind one"


async def test_a_queue_subscribed_by_a_plain_connection_leaves_the_service(router):
    cert = self_signed_cert()
    with trio.fail_after(10):
        async with connect(router, service=cert) as service, connect(router) as plain:
            q1, q2, q3 = await service.create_queues(3, subscribe=True)
            assert await plain.recipient(q2, SUB()) == OK()
            ended = await service.next_event()
            assert (ended.entity_id, ended.response) == (q2.recipient_id, END())
            assert await service.service_command(SUBS()) == 2
            assert (await service.next_event()).response == ALLS()
            # and a queue made elsewhere joins the service when a service connection SUBs it
            other = await plain.create_queue()
            assert await service.recipient(other, SUB()) == SOK(service.service_id)
            assert await service.service_command(SUBS()) == 3


async def test_any_new_in_a_service_session_joins_the_service_whatever_its_submode(router):
    cert = self_signed_cert()
    with trio.fail_after(10):
        async with connect(router, service=cert) as service:
            await service.create_queue(subscribe=False)
            assert await service.service_command(SUBS()) == 1
            assert (await service.next_event()).response == ALLS()


async def test_subs_for_another_service_or_with_another_key_is_refused_with_auth(router):
    cert = self_signed_cert()
    other_seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with connect(router, service=cert) as service, \
                connect(router, service=cert, role=b"N") as notifier:
            assert service.service is not None and notifier.service is not None
            seed = service.service.session_seed
            assert await service.command(service.service_id, SUBS(), other_seed) == ERR(AUTH)
            assert await service.command(b"x" * 24, SUBS(), seed) == ERR(AUTH)
            assert await service.command(service.service_id, SUBS(), seed) != ERR(AUTH)
            seed = notifier.service.session_seed
            assert await notifier.command(b"x" * 24, NSUBS(), seed) == ERR(AUTH)
            assert await notifier.command(notifier.service_id, NSUBS(), seed) != ERR(AUTH)


async def test_nsubs_subscribes_the_services_notifiers_and_a_second_connection_takes_them(
    router,
):
    cert = self_signed_cert()
    with trio.fail_after(20):
        async with connect(router) as recipient:
            queues = await recipient.create_queues(5)
            notifiers = [await recipient.enable_notifications(q) for q in queues]
            async with connect(router, service=cert, role=b"N") as first_ntf:
                responses = await first_ntf.commands(
                    [(n.notifier_id, NSUB(), n.seed) for n in notifiers]
                )
                # each service-signed NSUB joins the notifier to the service
                assert responses == [SOK(first_ntf.service_id)] * 5

            async def notified(client: Session) -> set[bytes]:
                flagged = [(q.sender_id, SEND(b"T", b"hi"), None) for q in queues]
                assert await recipient.commands(flagged) == [OK()] * 5
                events = [await client.next_event() for _ in queues]
                assert all(isinstance(e.response, NMSG) for e in events)
                return {e.entity_id for e in events}

            async with connect(router, service=cert, role=b"N") as ntf, \
                    connect(router, service=cert, role=b"N") as successor, \
                    connect(router, service=cert) as messaging:
                assert await ntf.service_command(NSUBS()) == 5
                assert await notified(ntf) == {n.notifier_id for n in notifiers}
                assert await successor.service_command(NSUBS()) == 5
                ended = await ntf.next_event()
                assert (ended.entity_id, ends_count(ended)) == (ntf.service_id, 5)
                assert await notified(successor) == {n.notifier_id for n in notifiers}
                assert await ntf.no_more_events()
                # the certificate's messaging service is another service, with no queues
                assert messaging.service_id != successor.service_id
                assert await messaging.service_command(SUBS()) == 0


async def test_subs_walks_the_store_by_pages_through_queues_changed_meanwhile(
    router, monkeypatch
):
    """The walk holds a page at a time; a queue released or deleted before the walk
    reaches it is skipped, one associated meanwhile does no harm, and every other
    waiting message comes once."""
    monkeypatch.setattr(services_core, "CATCH_UP_PAGE", 8)
    monkeypatch.setattr(services_core, "CATCH_UP_STEP", 3)
    store_type = type(router.queues)
    read_page = store_type.service_queue_page
    reached, resume = trio.Event(), trio.Event()
    page_sizes: list[int] = []

    async def pausing_page(self, service_id, party, after, limit):
        if after is not None and not reached.is_set():  # the second page: the first is walked
            reached.set()
            await resume.wait()
        page = await read_page(self, service_id, party, after, limit)
        page_sizes.append(len(page))
        return page

    monkeypatch.setattr(store_type, "service_queue_page", pausing_page)
    cert = self_signed_cert()
    queues = sorted(await service_queues(router, cert, 40), key=lambda q: q.recipient_id)
    released, deleted = queues[12], queues[20]  # in pages the walk has not read yet
    with trio.fail_after(20):
        async with connect(router) as sender, connect(router) as plain, \
                connect(router, service=cert) as service, \
                connect(router, service=cert) as creator:
            bodies = [body(i) for i in range(len(queues))]
            assert set(await sender.commands(sends(queues, bodies))) == {OK()}
            async with trio.open_nursery() as nursery:
                walked: list[tuple[int, list[Reply], set[int]]] = []

                async def subs() -> None:
                    walked.append(await catch_up(service, router))

                nursery.start_soon(subs)
                await reached.wait()
                assert await plain.recipient(released, SUB()) == OK()
                assert await plain.recipient(deleted, DEL()) == OK()
                await creator.create_queues(3, subscribe=True)  # associated during the walk
                resume.set()
            [(count, messages, _)] = walked
            assert count == 40
            got = Counter(m.entity_id for m in messages)
            assert got == Counter(q.recipient_id for q in queues if q not in (released, deleted))
            assert max(page_sizes) <= 8 and len(page_sizes) >= 40 // 8
            assert await service.no_more_events()


async def test_nsubs_registers_nothing_per_notifier_and_gets_what_was_pending(router):
    cert = self_signed_cert()
    with trio.fail_after(20):
        async with connect(router) as recipient:
            queues = await recipient.create_queues(5)
            notifiers = [await recipient.enable_notifications(q) for q in queues]
            async with connect(router, service=cert, role=b"N") as first:
                responses = await first.commands(
                    [(n.notifier_id, NSUB(), n.seed) for n in notifiers]
                )
                assert responses == [SOK(first.service_id)] * 5
            # sent while the service has no connection: kept for it
            flagged = [(q.sender_id, SEND(b"T", b"hi"), None) for q in queues]
            assert await recipient.commands(flagged) == [OK()] * 5
            async with connect(router, service=cert, role=b"N") as ntf:
                assert await ntf.service_command(NSUBS()) == 5
                assert router.subscriptions.notifiers_subscribed() == 0
                events = [await ntf.next_event() for _ in queues]
                assert all(isinstance(e.response, NMSG) for e in events)
                assert {e.entity_id for e in events} == {n.notifier_id for n in notifiers}
                assert await ntf.no_more_events()


async def test_a_service_holds_no_subscription_per_idle_queue_whatever_their_count(router):
    """SUBS of many queues leaves no per-queue entry; a message on its way makes one,
    its ACK of the queue's last message takes it away."""
    cert = self_signed_cert()
    subscriptions = router.subscriptions
    with trio.fail_after(20):
        for n in (20, 200):
            queues = await service_queues(router, cert, n)
            async with connect(router) as sender, connect(router, service=cert) as service:
                count, messages, _ = await catch_up(service, router)
                assert messages == [] and count >= n
                assert len(subscriptions) == 0 and subscriptions.service_subs_count() == 0
                busy = queues[:3]
                for q in busy:
                    await sender.send(q.sender_id, b"live")
                pushed = [await service.next_message(q) for q in busy]
                assert len(subscriptions) == subscriptions.service_subs_count() == 3
                for q, (msg, _) in zip(busy, pushed, strict=True):
                    assert await service.recipient(q, ACK(msg.msg_id)) == OK()
                assert len(subscriptions) == 0 and subscriptions.service_subs_count() == 0


async def test_a_send_to_an_associated_queue_after_subs_is_delivered_one_unacknowledged_at_once(
    router,
):
    cert = self_signed_cert()
    q1, q2 = await service_queues(router, cert, 2)
    with trio.fail_after(10):
        async with connect(router) as sender, connect(router, service=cert) as service:
            assert await service.service_command(SUBS()) == 2
            assert (await service.next_event()).response == ALLS()
            for i in range(3):
                await sender.send(q1.sender_id, body(i))
            await sender.send(q2.sender_id, b"other queue")
            first, opened_first = await service.next_message(q1)
            _, opened_other = await service.next_message(q2)
            assert (opened_first.body, opened_other.body) == (body(0), b"other queue")
            assert await service.no_more_events()  # q1's next wait for its ACK
            for i in (1, 2):
                assert await service.recipient(q1, ACK(first.msg_id)) == OK()
                first, opened = await service.next_message(q1)  # the ACK's answer
                assert opened.body == body(i)
                assert await service.no_more_events()
            assert await service.recipient(q1, ACK(first.msg_id)) == OK()
            assert await service.recipient(q1, ACK(first.msg_id)) == ERR(NO_MSG)
            assert await service.no_more_events()


async def test_a_takeover_sends_one_ends_and_the_new_holder_gets_the_unacknowledged_and_new(
    router,
):
    cert = self_signed_cert()
    queues = await service_queues(router, cert, 30)
    busy = queues[:10]
    with trio.fail_after(20):
        async with connect(router) as sender, connect(router, service=cert) as first, \
                connect(router, service=cert) as second:
            assert await first.service_command(SUBS()) == 30
            assert (await first.next_event()).response == ALLS()
            assert set(await sender.commands(sends(busy, [b"old"] * 10))) == {OK()}
            pushed = [await first.next_event() for _ in busy]  # never acknowledged there
            assert all(isinstance(e.response, MSG) for e in pushed)
            assert {e.entity_id for e in pushed} == {q.recipient_id for q in busy}
            count, moved, _ = await catch_up(second, router)
            assert count == 30
            assert ends_count(await first.next_event()) == 30
            assert await first.no_more_events()  # one ENDS, no END per queue
            assert sorted(m.entity_id for m in moved) == sorted(q.recipient_id for q in busy)
            await sender.send(queues[20].sender_id, b"new")
            _, new = await second.next_message(queues[20])
            assert new.body == b"new"
            assert await first.no_more_events()
            assert router.subscriptions.service_subs_count() == 11
