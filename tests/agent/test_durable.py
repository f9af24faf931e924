"""The durable subscriber against the real router: ACK after the handler,
de-duplication of redeliveries, and exactly-once handling across restarts."""

from __future__ import annotations

from collections import Counter

import pytest
import trio
from agent_helpers import (
    HEAVY_KIND,
    RESTART_KINDS,
    EventLog,
    create_queues,
    keep_sending,
    restartable_router,
    send_to,
)

from router.client import SMPError
from router.client.agent_state import AgentEvent, ReceivedMessage
from router.client.backoff import Backoff
from router.client.durable import DurableMessage, RecentIds, open_durable_subscriber
from router.protocol.types import QUOTA

FAST = Backoff(initial=0.01, maximum=0.2)


class Crash(Exception):
    """The application failing (or the program stopping) inside its handler."""


async def test_a_message_whose_handler_fails_is_not_acknowledged_and_comes_again(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"one", b"two")
            seen: list[DurableMessage] = []

            async def failing(message: DurableMessage) -> None:
                seen.append(message)
                raise Crash

            with pytest.raises(Crash):
                async with open_durable_subscriber(backoff=FAST) as subscriber:
                    subscriber.add_queues(router.address, [q.queue])
                    await subscriber.run(failing)
            async with open_durable_subscriber(backoff=FAST) as subscriber:
                subscriber.add_queues(router.address, [q.queue])
                again = await anext(subscriber)
                assert (again.msg_id, again.body) == (seen[0].msg_id, b"one")
                following = await anext(subscriber)  # asking for it ACKs "one"
                assert following.body == b"two"
                assert subscriber.statistics().acknowledged == 1


async def test_a_handled_message_whose_ack_was_lost_is_acknowledged_but_not_handed_over_again(
    tmp_path,
):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"once")
            handled: list[bytes] = []
            async with open_durable_subscriber(backoff=FAST) as subscriber:
                subscriber.add_queues(router.address, [q.queue])
                async for message in subscriber:
                    handled.append(message.body)
                    if message.body == b"once":
                        # The connection goes before the ACK: the router keeps the message.
                        await router.restart()
                        await send_to(router.address, q, b"after")
                    else:
                        break
                stats = subscriber.statistics()
            assert handled == [b"once", b"after"]
            assert stats.duplicates == 1 and stats.delivered == 2


async def test_the_applications_own_record_lets_a_fresh_subscriber_skip_a_handled_message(
    tmp_path,
):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"paid", b"shipped")
            recorded: set[bytes] = set()

            async def record_then_crash(message: DurableMessage) -> None:
                recorded.add(message.msg_id)  # committed with the application's state...
                raise Crash  # ...and the program stops before the ACK

            with pytest.raises(Crash):
                async with open_durable_subscriber(backoff=FAST) as subscriber:
                    subscriber.add_queues(router.address, [q.queue])
                    await subscriber.run(record_then_crash)

            async def lookup(message: DurableMessage) -> bool:
                await trio.lowlevel.checkpoint()  # as a database query would
                return message.msg_id in recorded

            async with open_durable_subscriber(backoff=FAST, is_processed=lookup) as subscriber:
                subscriber.add_queues(router.address, [q.queue])
                message = await anext(subscriber)
                assert message.body == b"shipped"
                assert subscriber.statistics().duplicates == 1


async def test_a_quota_marker_is_acknowledged_without_being_handed_over(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path, quota=2) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"a", b"b")
            with pytest.raises(SMPError) as refused:
                await send_to(router.address, q, b"refused")
            assert refused.value.error == QUOTA
            marker_acked = trio.Event()

            def on_event(event: AgentEvent) -> None:
                if isinstance(event, ReceivedMessage) and event.message.quota:
                    marker_acked.set()

            async with open_durable_subscriber(backoff=FAST, on_event=on_event) as subscriber:
                subscriber.add_queues(router.address, [q.queue])
                assert (await anext(subscriber)).body == b"a"
                assert (await anext(subscriber)).body == b"b"
                async with trio.open_nursery() as nursery:
                    got = []

                    async def next_message() -> None:
                        got.append(await anext(subscriber))  # ACKs "b", then the marker

                    nursery.start_soon(next_message)
                    await marker_acked.wait()
                    await send_to(router.address, q, b"accepted again")
                assert [m.body for m in got] == [b"accepted again"]
                assert subscriber.statistics().quota_markers == 1


def test_the_recent_id_memory_keeps_only_the_newest_ids():
    recent = RecentIds(3)
    for key in (b"a", b"b", b"c", b"a", b"d"):
        recent.add(key)
    assert len(recent) == 3
    assert b"b" not in recent and all(k in recent for k in (b"a", b"c", b"d"))


async def exactly_once_across_restart(tmp_path, kind: str, n_queues: int, per_sender: int):
    """Senders keep sending while the router restarts; every message answered OK
    reaches the handler exactly once, and every queue goes DOWN once and UP once."""
    async with restartable_router(tmp_path, kind) as router:
        queues = await create_queues(router.address, n_queues)
        rids = [q.rid for q in queues]
        ok: set[bytes] = set()
        attempted: set[bytes] = set()
        handled: Counter[bytes] = Counter()
        log = EventLog()

        async def handler(message: DurableMessage) -> None:
            handled[message.body] += 1
            log.progress.notify()

        async with open_durable_subscriber(
            backoff=FAST, on_event=log.add, batch_size=250
        ) as subscriber, trio.open_nursery() as nursery:
            subscriber.add_queues(router.address, [q.queue for q in queues])
            nursery.start_soon(subscriber.run, handler)
            await log.wait_all_up(rids)
            total = 4 * per_sender
            async with trio.open_nursery() as senders:
                for s in range(4):
                    senders.start_soon(keep_sending, router, queues[s::4], per_sender, f"s{s}",
                                       ok, attempted, log.progress)
                await log.progress.wait_until(lambda: len(ok) >= total // 4)
                sent_before_restart = len(attempted)
                await router.restart()
            await log.wait_all_up(rids, times=2)
            await log.progress.wait_until(lambda: ok <= handled.keys())
            nursery.cancel_scope.cancel()
        assert sent_before_restart < total  # the senders were still at it
        assert len(ok) > total // 4
        assert [b for b, n in handled.items() if n != 1] == []
        assert handled.keys() <= attempted
        assert all(log.history[r] == ["UP", "DOWN", "UP"] for r in rids)


@pytest.mark.parametrize("kind", RESTART_KINDS)
async def test_every_message_answered_ok_is_handled_exactly_once_across_a_router_restart(
    tmp_path, kind
):
    with trio.fail_after(60):
        await exactly_once_across_restart(tmp_path, kind, n_queues=100, per_sender=150)


# With the journal store this takes 20-60 s on two cores (most of it creating the
# queues), so it runs with the stress tests; the memory store's run is the default.
THOUSAND_QUEUE_KINDS = [
    pytest.param(kind, marks=[pytest.mark.stress] if kind != "memory" else [])
    for kind in dict.fromkeys([HEAVY_KIND, "memory"])
]


@pytest.mark.parametrize("kind", THOUSAND_QUEUE_KINDS)
async def test_a_thousand_queues_with_active_senders_survive_a_restart_exactly_once(
    tmp_path, kind
):
    with trio.fail_after(300):
        await exactly_once_across_restart(tmp_path, kind, n_queues=1000, per_sender=1000)
