"""Random sequences of link operations on every queue store, checked step by step
against a plain model of the link rules, with ids drawn from small pools so that
taken ids, changed fixed parts and missing queues come up often (deterministic
seeds, so failures reproduce). Persistent stores are reopened midway."""

from __future__ import annotations

import os
import random

import pytest

from router.protocol.types import AUTH
from store.interfaces import DUPLICATE, Party, QueueLinkData, QueueRecord

STEPS = 400


class Model:
    """Queues and their links, by the rules of docs/stores.md#short-links, written plainly."""

    def __init__(self) -> None:
        self.links: dict[bytes, QueueLinkData | None] = {}  # live queue -> its link

    def holder(self, link_id: bytes) -> bytes | None:
        return next((r for r, k in self.links.items() if k and k.link_id == link_id), None)

    def add(self, rid: bytes, link: QueueLinkData | None):
        if rid in self.links or (link is not None and self.holder(link.link_id) is not None):
            return DUPLICATE
        self.links[rid] = link
        return None

    def set_link(self, rid: bytes, link: QueueLinkData):
        if rid not in self.links:
            return AUTH
        current = self.links[rid]
        if current is not None:
            if (current.link_id, current.fixed_data) != (link.link_id, link.fixed_data):
                return AUTH
        elif self.holder(link.link_id) is not None:
            return AUTH
        self.links[rid] = link
        return None

    def delete_link(self, rid: bytes):
        if rid not in self.links:
            return AUTH
        self.links[rid] = None
        return None

    def delete(self, rid: bytes):
        return self.links.pop(rid, AUTH)


def record(rid: bytes, link: QueueLinkData | None) -> QueueRecord:
    return QueueRecord(
        rid,
        os.urandom(24),
        b"rk",
        os.urandom(32),
        None,
        False,
        queue_mode=b"C",
        link_id=None if link is None else link.link_id,
    )


async def check_state(store, model: Model) -> None:
    assert {r.recipient_id async for r in store.iter_queues()} == model.links.keys()
    assert {rid: link async for rid, link in store.iter_links()} == {
        rid: link for rid, link in model.links.items() if link is not None
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_link_operations_follow_the_model(queue_backend, store_path, seed):
    rng = random.Random(seed)
    rids = [bytes([i]) * 24 for i in range(6)]
    link_ids = [bytes([100 + i]) * 24 for i in range(4)]

    def a_link() -> QueueLinkData:
        return QueueLinkData(
            rng.choice(link_ids), rng.choice([b"", b"fixed A", b"fixed B"]), rng.randbytes(3)
        )

    model = Model()
    seen: set[tuple[str, str]] = set()  # (operation, expected answer) pairs met
    for half in range(2):  # a persistent store is reopened between the halves
        async with queue_backend.open(store_path) as store:
            await check_state(store, model)
            for step in range(STEPS // 2):
                rid, op = rng.choice(rids), rng.choice(["add", "set", "set", "del_link", "del"])
                where = f"seed {seed}, half {half}, step {step}: {op}"
                if op == "add":
                    link = a_link() if rng.random() < 0.7 else None
                    want = model.add(rid, link)
                    assert await store.add_queue(record(rid, link), link) == want, where
                elif op == "set":
                    link = a_link()
                    if rng.random() < 0.5 and model.links.get(rid):
                        kept = model.links[rid]  # a user part change, most likely allowed
                        link = QueueLinkData(kept.link_id, kept.fixed_data, rng.randbytes(2))
                    want = model.set_link(rid, link)
                    assert await store.set_link(rid, link) == want, where
                elif op == "del_link":
                    want = model.delete_link(rid)
                    assert await store.delete_link(rid) == want, where
                else:
                    want = model.delete(rid)
                    got = await store.delete_queue(rid)
                    if want is AUTH:
                        assert got == AUTH, where
                    else:
                        assert isinstance(got, QueueRecord) and got.recipient_id == rid, where
                        assert got.link_id == (None if want is None else want.link_id), where
                    want = want if want is AUTH else None
                seen.add((op, str(want)))
                for lid in link_ids:
                    found = await store.get_queue(Party.LINK, lid)
                    holder = model.holder(lid)
                    assert (None if found is None else found.recipient_id) == holder, where
                    if holder is not None:
                        assert await store.get_link(holder) == model.links[holder], where
            await check_state(store, model)
        if not queue_backend.persistent:
            break
    assert seen >= {
        ("add", "None"),
        ("add", "DUPLICATE_"),
        ("set", "None"),
        ("set", "AUTH"),
        ("del_link", "None"),
        ("del_link", "AUTH"),
        ("del", "None"),
        ("del", "AUTH"),
    }
