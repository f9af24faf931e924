"""Random operation sequences on every message store, checked step by step against a
plain list model of docs/protocol.md#behaviour (deterministic seeds, so failures reproduce)."""

from __future__ import annotations

import random

import pytest

from store.interfaces import Message, WriteResult

QUOTA = 3


class Model:
    """The message store written as plainly as possible."""

    def __init__(self) -> None:
        self.queues: dict[bytes, list[Message]] = {}

    def write(self, rid: bytes, m: Message, quota: int) -> WriteResult:
        q = self.queues.setdefault(rid, [])
        if q and q[-1].quota:
            return WriteResult.QUOTA_EXCEEDED
        if len(q) >= quota:
            q.append(Message(m.msg_id, m.ts, b"", b"", True))
            return WriteResult.QUOTA_EXCEEDED
        q.append(m)
        return WriteResult.STORED if len(q) > 1 else WriteResult.STORED_INTO_EMPTY

    def head(self, rid: bytes) -> Message | None:
        q = self.queues.get(rid)
        return q[0] if q else None

    def delete(self, rid: bytes, msg_id: bytes) -> tuple[bool, Message | None]:
        q = self.queues.get(rid, [])
        if q and q[0].msg_id == msg_id:
            q.pop(0)
            return True, self.head(rid)
        return False, self.head(rid)

    def expire(self, rid: bytes, before: int) -> int:
        q = self.queues.get(rid, [])
        n = 0
        while q and q[0].ts < before:
            q.pop(0)
            n += 1
        return n

    def clear(self, rid: bytes) -> int:
        return len(self.queues.pop(rid, []))

    def ids(self) -> set[bytes]:
        return {rid for rid, q in self.queues.items() if q}


@pytest.mark.parametrize("seed", range(4))
async def test_random_operations_agree_with_the_model(messages, seed):
    rng = random.Random(seed)
    rids = [bytes([i]) * 24 for i in range(3)]
    model = Model()
    clock = 0
    for step in range(300):
        rid = rng.choice(rids)
        op = rng.random()
        if op < 0.45:
            clock += rng.randint(0, 3)
            m = Message(rng.randbytes(24), clock, b"T", rng.randbytes(rng.randint(0, 40)))
            quota = QUOTA if rng.random() < 0.9 else rng.randint(0, QUOTA + 1)
            got = await messages.write_message(rid, m, quota)
            assert got is model.write(rid, m, quota), step
        elif op < 0.75:
            head = model.head(rid)
            msg_id = head.msg_id if head and rng.random() < 0.8 else rng.randbytes(24)
            assert await messages.delete_message(rid, msg_id) == model.delete(rid, msg_id), step
        elif op < 0.85:
            assert await messages.peek_message(rid) == model.head(rid), step
        elif op < 0.93:
            before = clock - rng.randint(0, 4)
            assert await messages.expire_messages(rid, before) == model.expire(rid, before), step
        elif op < 0.97:
            assert await messages.delete_queue_messages(rid) == model.clear(rid), step
        else:
            assert {r async for r in messages.queue_ids()} == model.ids(), step
        assert await messages.queue_size(rid) == len(model.queues.get(rid, [])), step
    for rid in rids:
        assert [m async for m in messages.iter_messages(rid)] == model.queues.get(rid, [])
