"""The NEW rate limit per connection and the memory store's cap on stored bytes."""

from __future__ import annotations

import pytest
import trio

from router.client import SMPError, open_client
from router.protocol.types import ErrorType
from store.interfaces import Message, WriteResult
from store.memory.stores import QUEUE_COST, MemoryMessageStore, message_cost


async def test_new_beyond_the_burst_gets_err_store_and_other_connections_do_not(
    start_router, autojump_clock
):
    info = await start_router(new_queue_rate=1.0, new_queue_burst=3)
    with trio.fail_after(30):
        async with open_client(info.address) as greedy, open_client(info.address) as other:
            for _ in range(3):
                await greedy.create_queue()
            with pytest.raises(SMPError) as refused:
                await greedy.create_queue()
            assert refused.value.error == ErrorType("STORE", "NEW_RATE_LIMIT")
            await other.create_queue()  # its own bucket
            await trio.sleep(1.0)  # one token back after a second
            await greedy.create_queue()
            with pytest.raises(SMPError):
                await greedy.create_queue()
    assert info.router.counters.new_queues_rate_limited == 2
    assert info.router.statistics().queues_created == 5


async def test_without_a_rate_new_is_not_limited(start_router):
    info = await start_router(new_queue_burst=1)  # the rate is off: the burst is unused
    async with open_client(info.address) as client:
        for _ in range(5):
            await client.create_queue()


def message(n: int, size: int) -> Message:
    return Message(b"%023d" % n + b"m", n, b"F", b"x" * size)


async def test_the_memory_cap_refuses_writes_keeps_what_is_stored_and_frees_on_ack():
    one = message_cost(message(0, 100))
    store = MemoryMessageStore(max_bytes=QUEUE_COST + 2 * one + one // 2)
    rid = b"q" * 24
    assert [store.write_message_nowait(rid, message(i, 100), 10) for i in range(3)] == [
        WriteResult.STORED_INTO_EMPTY, WriteResult.STORED, WriteResult.STORE_FULL
    ]
    assert store.stored_bytes() == QUEUE_COST + 2 * one and len(store.messages(rid)) == 2
    deleted, _ = await store.delete_message(rid, message(0, 100).msg_id)
    assert deleted and store.stored_bytes() == QUEUE_COST + one
    assert store.write_message_nowait(rid, message(3, 100), 10) is WriteResult.STORED
    assert await store.expire_messages(rid, 2) == 1 and store.stored_bytes() == QUEUE_COST + one
    assert await store.delete_queue_messages(rid) == 1 and store.stored_bytes() == 0


async def test_the_memory_cap_counts_empty_messages_too():
    """Bodies alone would let empty messages past any cap (issue: 51,200 empty SENDs
    under a 1 MB cap, all accepted)."""
    store = MemoryMessageStore(max_bytes=64 * 1024)
    results = [store.write_message_nowait(b"e" * 24, message(i, 0), 100_000)
               for i in range(2000)]
    stored = results.count(WriteResult.STORED) + results.count(WriteResult.STORED_INTO_EMPTY)
    assert stored == (64 * 1024 - QUEUE_COST) // message_cost(message(0, 0))
    assert results[stored:] == [WriteResult.STORE_FULL] * (2000 - stored)


async def test_a_full_queue_still_gets_quota_not_store_full():
    store = MemoryMessageStore(max_bytes=QUEUE_COST + message_cost(message(0, 100)))
    rid = b"r" * 24
    assert store.write_message_nowait(rid, message(0, 100), 1) is WriteResult.STORED_INTO_EMPTY
    assert store.write_message_nowait(rid, message(1, 100), 1) is WriteResult.QUOTA_EXCEEDED


async def test_a_snapshot_bigger_than_the_cap_loads_whole(tmp_path):
    store = MemoryMessageStore()
    for i in range(5):
        store.write_message_nowait(b"s" * 24, message(i, 100), 10)
    store.save(tmp_path / "m.snapshot")
    loaded = MemoryMessageStore.load(tmp_path / "m.snapshot")
    loaded.max_bytes = 200
    assert loaded.stored_bytes() == QUEUE_COST + 5 * message_cost(message(0, 100))
    assert len(loaded.messages(b"s" * 24)) == 5
    assert loaded.write_message_nowait(b"t" * 24, message(9, 1), 10) is WriteResult.STORE_FULL


async def test_send_over_the_cap_gets_err_store_memory_full_and_nothing_is_lost(start_router):
    one = message_cost(Message(b"i" * 24, 0, b"T", b"x" * 1000))  # flags "T": no notification
    info = await start_router(memory_store_max_bytes=QUEUE_COST + 3 * one, quota=100)
    with trio.fail_after(30):
        async with open_client(info.address) as recipient, open_client(info.address) as sender:
            q = await recipient.create_queue()
            for i in range(3):
                await sender.send(q.sender_id, b"%04d" % i + b"x" * 996)
            with pytest.raises(SMPError) as refused:
                await sender.send(q.sender_id, b"one too many")
            assert refused.value.error == ErrorType("STORE", "MEMORY_FULL")
            assert info.router.counters.messages_store_full == 1
            received = []
            for _ in range(3):
                event = await recipient.get(q)
                received.append(event.body[:4])
                await recipient.ack(q, event.msg_id)
            assert received == [b"0000", b"0001", b"0002"]
            await sender.send(q.sender_id, b"room again")


async def test_empty_sends_stop_at_the_memory_cap(start_router):
    """Under a 64 KiB cap, SENDs with empty bodies are refused once what they cost in
    memory reaches the cap (they were all accepted when only bodies counted)."""
    cap, attempts = 64 * 1024, 2000
    info = await start_router(memory_store_max_bytes=cap, quota=attempts)
    accepted = 0
    with trio.fail_after(60):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            for _ in range(attempts):
                try:
                    await client.send(q.sender_id, b"")
                except SMPError as e:
                    assert e.error == ErrorType("STORE", "MEMORY_FULL")
                    break
                accepted += 1
    assert accepted <= cap // message_cost(Message(b"i" * 24, 0, b"", b"")), \
        f"{accepted} empty SENDs accepted under a {cap}-byte cap"
