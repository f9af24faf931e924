"""Service subscriptions end to end: SUBS catch-up and ALLS, takeover with ENDS, NSUBS."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
import trio
from e2e_helpers import assert_no_more_events, create_queues, router_connection, send_many

from router.client import (
    AllReceivedEvent,
    EndEvent,
    MessageEvent,
    NotificationEvent,
    RecipientQueue,
    ServiceEndEvent,
    SMPClient,
    SMPError,
    open_client,
)
from router.protocol import crypto
from router.protocol.types import AUTH, ERR, NID, NKEY, NO_MSG, NSUB, NSUBS, OK, SEND, SUBS
from router.server import SINGLE_TASK, RouterInfo

CONNECTION_TASKS = 3  # receive, send, delivery


def body(i: int) -> bytes:
    return b"message %d" % i


async def service_queues(info: RouterInfo, seed: bytes, n: int) -> list[RecipientQueue]:
    """`n` queues created with subMode S by a connection of the service: all associated."""
    async with open_client(info.address, service_seed=seed) as creator:
        return await create_queues(creator, n, subscribe=True)


async def catch_up(
    client: SMPClient, queues: Sequence[RecipientQueue], info: RouterInfo
) -> tuple[int, list[MessageEvent], set[int]]:
    """SUBS, then every event up to ALLS; also the connection's task counts seen meanwhile."""
    for q in queues:
        client.add_queue(q)
    conn = router_connection(info, client)
    task_counts = {conn.task_count()}
    count = await client.subscribe_service()
    messages: list[MessageEvent] = []
    while True:
        event = await client.next_event()
        task_counts.add(conn.task_count())
        if isinstance(event, AllReceivedEvent):
            return count, messages, task_counts
        assert isinstance(event, MessageEvent), event
        messages.append(event)


async def check_catch_up_and_takeover(
    info: RouterInfo, delivery: str, n_queues: int, n_full: int
) -> None:
    seed, _ = crypto.new_ed25519()
    queues = await service_queues(info, seed, n_queues)
    full = queues[:n_full]
    async with open_client(info.address) as sender:
        await send_many(sender, [(q.sender_id, body(i)) for i, q in enumerate(full)])

    async with open_client(info.address, service_seed=seed) as first:
        count, messages, task_counts = await catch_up(first, queues, info)
        assert count == n_queues
        assert Counter(m.body for m in messages) == Counter(body(i) for i in range(n_full))
        if delivery == SINGLE_TASK:
            assert task_counts == {CONNECTION_TASKS}  # the catch-up added no task
        else:
            assert max(task_counts) == CONNECTION_TASKS + n_queues  # one per queue
        await assert_no_more_events(first)

        # The first connection acknowledges half; the rest stays in flight there.
        by_queue = {q.recipient_id: q for q in queues}
        acked, unacked = messages[: n_full // 2], messages[n_full // 2 :]
        errors = await first.ack_many([(by_queue[m.recipient_id], m.msg_id) for m in acked])
        assert errors == [None] * len(acked)

        async with open_client(info.address, service_seed=seed) as second:
            count, moved, _ = await catch_up(second, queues, info)
            assert count == n_queues
            assert await first.next_event() == ServiceEndEvent(first.service_id, n_queues)
            assert sorted((m.recipient_id, m.msg_id, m.body) for m in moved) == sorted(
                (m.recipient_id, m.msg_id, m.body) for m in unacked
            )
            await assert_no_more_events(second)
            # the queue is the second connection's now: the first cannot acknowledge it
            stale = unacked[0]
            with pytest.raises(SMPError) as e:
                await first.ack(by_queue[stale.recipient_id], stale.msg_id)
            assert e.value.error == NO_MSG
            await assert_no_more_events(first)


# 10,000 queues of which 3,000 hold a message. The design this router replaces
# (a task per queue) and the durable stores take several times as long, so they
# run at that size with the stress tests and at 2,000 / 600 otherwise (the
# durable stores only when SMP_E2E_STORES names them, as for every `scale` test).
FULL_SCALE, SMALL_SCALE = (10_000, 3_000), (2_000, 600)


@pytest.mark.scale
async def test_subs_delivers_every_waiting_message_once_through_the_delivery_task_then_alls(
    router_factory, delivery, store_kind
):
    info = await router_factory()
    full = delivery == SINGLE_TASK and store_kind == "memory"
    n_queues, n_full = FULL_SCALE if full else SMALL_SCALE
    with trio.fail_after(300):
        await check_catch_up_and_takeover(info, delivery, n_queues, n_full)


@pytest.mark.stress
async def test_subs_delivers_3000_waiting_messages_of_10000_queues_once_in_every_setting(
    router_factory, delivery, store_kind
):
    if delivery == SINGLE_TASK and store_kind == "memory":
        pytest.skip("the default run covers this setting at this size")
    info = await router_factory()
    with trio.fail_after(600):
        await check_catch_up_and_takeover(info, delivery, *FULL_SCALE)


@pytest.mark.scale
async def test_messages_sent_while_subs_catches_up_are_delivered_exactly_once(router_factory):
    # A small outbox keeps the catch-up waiting on the client, so SENDs land meanwhile.
    info = await router_factory(send_queue_size=2)
    seed, _ = crypto.new_ed25519()
    queues = await service_queues(info, seed, 1000)
    waiting, empty = queues[:300], queues[300:600]
    with trio.fail_after(60):
        async with (
            open_client(info.address) as sender,
            open_client(info.address, service_seed=seed) as service,
        ):
            before = [(q.sender_id, b"before %d" % i) for i, q in enumerate(waiting)]
            await send_many(sender, before)
            for q in queues:
                service.add_queue(q)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_many, sender, [
                    (q.sender_id, b"during %d" % i) for i, q in enumerate(empty)
                ])
                assert await service.subscribe_service() == 1000
                received: list[bytes] = []
                alls = 0
                while alls == 0 or len(received) < 600:
                    event = await service.next_event()
                    if isinstance(event, AllReceivedEvent):
                        alls += 1
                    else:
                        received.append(event.body)  # type: ignore[union-attr]
            await assert_no_more_events(service)
            assert alls == 1
            assert Counter(received) == Counter(
                [b"before %d" % i for i in range(300)] + [b"during %d" % i for i in range(300)]
            )


async def test_after_a_takeover_new_messages_go_to_the_new_service_connection(router):
    seed, _ = crypto.new_ed25519()
    [q] = await service_queues(router, seed, 1)
    with trio.fail_after(10):
        async with (
            open_client(router.address) as sender,
            open_client(router.address, service_seed=seed) as first,
            open_client(router.address, service_seed=seed) as second,
        ):
            first.add_queue(q)
            second.add_queue(q)
            assert await first.subscribe_service() == 1
            assert await first.next_event() == AllReceivedEvent()
            assert await second.subscribe_service() == 1
            assert await first.next_event() == ServiceEndEvent(first.service_id, 1)
            assert await second.next_event() == AllReceivedEvent()
            await sender.send(q.sender_id, b"after the takeover")
            assert (await second.next_event()).body == b"after the takeover"
            await assert_no_more_events(first)


async def test_subs_again_on_the_same_connection_delivers_what_is_waiting_and_not_in_flight(
    router,
):
    seed, _ = crypto.new_ed25519()
    q1, q2 = await service_queues(router, seed, 2)
    with trio.fail_after(10):
        async with (
            open_client(router.address) as sender,
            open_client(router.address, service_seed=seed) as service,
        ):
            await sender.send(q1.sender_id, b"one")
            service.add_queue(q1)
            service.add_queue(q2)
            assert await service.subscribe_service() == 2
            first = await service.next_event()
            assert first.body == b"one" and await service.next_event() == AllReceivedEvent()
            await sender.send(q1.sender_id, b"behind one")
            await sender.send(q2.sender_id, b"two")
            assert (await service.next_event()).body == b"two"  # pushed live
            assert await service.subscribe_service() == 2
            assert await service.next_event() == AllReceivedEvent()  # nothing new to send
            await service.ack(q1, first.msg_id)
            assert (await service.next_event()).body == b"behind one"


async def test_a_queue_subscribed_by_a_plain_connection_leaves_the_service(router):
    seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with (
            open_client(router.address, service_seed=seed) as service,
            open_client(router.address) as plain,
        ):
            q1, q2, q3 = await create_queues(service, 3, subscribe=True)
            await plain.subscribe(q2)
            assert await service.next_event() == EndEvent(q2.recipient_id)
            assert await service.subscribe_service() == 2
            assert await service.next_event() == AllReceivedEvent()
            # and a queue made elsewhere joins the service when a service connection SUBs it
            [other] = await create_queues(plain, 1)
            await service.subscribe(other)
            assert await service.subscribe_service() == 3


async def test_create_only_queues_join_the_service_only_when_subscribed(router):
    seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with open_client(router.address, service_seed=seed) as service:
            q = await service.create_queue(subscribe=False)
            assert await service.subscribe_service() == 0
            assert await service.next_event() == AllReceivedEvent()
            await service.subscribe(q)
            assert await service.subscribe_service() == 1


async def test_subs_for_another_service_or_with_another_key_is_refused_with_auth(router):
    seed, _ = crypto.new_ed25519()
    other_seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with open_client(router.address, service_seed=seed) as service:
            assert service.service_id is not None
            assert await service.command(service.service_id, SUBS(), other_seed) == ERR(AUTH)
            assert await service.command(b"x" * 24, SUBS(), seed) == ERR(AUTH)
            assert await service.command(b"x" * 24, NSUBS(), seed) == ERR(AUTH)
            assert await service.command(service.service_id, NSUBS(), seed) != ERR(AUTH)


async def enable_notifiers(
    client: SMPClient, queues: Sequence[RecipientQueue]
) -> list[tuple[bytes, bytes, bytes]]:
    """NKEY for each queue in few blocks: (notifier id, notifier seed, NMSG box key)."""
    keys = [(crypto.new_ed25519(), crypto.new_x25519()) for _ in queues]
    requests = [
        (q.recipient_id, NKEY(ntf_key, dh_key), q.rcv_auth_seed)
        for q, ((_, ntf_key), (_, dh_key)) in zip(queues, keys, strict=True)
    ]
    out = []
    for ((seed, _), (dh_priv, _)), nid in zip(keys, await client.commands(requests), strict=True):
        assert isinstance(nid, NID), nid
        out.append((nid.notifier_id, seed, crypto.box_key(dh_priv, nid.srv_ntf_dh_key)))
    return out


async def test_nsubs_subscribes_the_services_notifiers_and_a_second_connection_takes_them(
    router,
):
    seed, _ = crypto.new_ed25519()
    with trio.fail_after(20):
        async with open_client(router.address) as recipient:
            queues = await create_queues(recipient, 5)
            notifiers = await enable_notifiers(recipient, queues)
            async with open_client(router.address, service_seed=seed) as first_ntf:
                responses = await first_ntf.commands(
                    [(nid, NSUB(), nseed) for nid, nseed, _ in notifiers]
                )
                assert responses == [OK()] * 5  # each NSUB joins the notifier to the service

            async def notified(client: SMPClient) -> set[bytes]:
                await recipient.commands([(q.sender_id, SEND(b"T", b"hi"), None) for q in queues])
                events = [await client.next_event() for _ in queues]
                assert all(isinstance(e, NotificationEvent) for e in events)
                return {e.notifier_id for e in events}  # type: ignore[union-attr]

            async with (
                open_client(router.address, service_seed=seed) as ntf,
                open_client(router.address, service_seed=seed) as successor,
            ):
                assert await ntf.subscribe_service_notifications() == 5
                assert await notified(ntf) == {nid for nid, _, _ in notifiers}
                assert await successor.subscribe_service_notifications() == 5
                assert await ntf.next_event() == ServiceEndEvent(ntf.service_id, 5)
                assert await notified(successor) == {nid for nid, _, _ in notifiers}
                await assert_no_more_events(ntf)
                # the recipient side of this service has no queues: NSUBS is separate
                assert await successor.subscribe_service() == 0
