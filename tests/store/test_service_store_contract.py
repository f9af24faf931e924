"""The QueueStore contract for services (docs/protocol.md#services): service records by
certificate and role, and the count and ids hash of each service's queues, kept
current as queues are associated, released and deleted; run against every
backend in conftest.QUEUE_BACKENDS."""

from __future__ import annotations

import hashlib
import os

from test_queue_store_contract import make_notifier, make_record, new_id, service_ids

from router.protocol.ids_hash import queue_ids_hash
from router.protocol.types import AUTH
from store.interfaces import EMPTY_IDS_HASH, Party, ServiceQueues, ServiceRecord


def make_service(role: bytes = b"M", cert: bytes | None = None) -> ServiceRecord:
    cert = os.urandom(300) if cert is None else cert
    return ServiceRecord(new_id(), role, cert, hashlib.sha256(cert).digest(), 1_700_000_000)


def figures(*ids: bytes) -> ServiceQueues:
    return ServiceQueues(len(ids), queue_ids_hash(ids))


async def test_a_service_is_stored_once_per_certificate_and_role(queues):
    first = make_service()
    assert await queues.add_service(first) == first
    again = make_service(cert=first.cert)  # another id offered for the same certificate
    assert await queues.add_service(again) == first
    notifier = make_service(b"N", cert=first.cert)
    assert await queues.add_service(notifier) == notifier
    other = make_service()
    assert await queues.add_service(other) == other


async def test_every_stored_service_is_listed_once(queues):
    stored = [await queues.add_service(make_service(role)) for role in (b"M", b"N", b"P")]
    await queues.add_service(make_service(cert=stored[0].cert))  # the same one again
    listed = [s async for s in queues.iter_services()]
    assert sorted(listed, key=lambda s: s.service_id) == sorted(
        stored, key=lambda s: s.service_id
    )


async def test_a_service_without_queues_has_count_zero_and_the_empty_hash(queues):
    service = await queues.add_service(make_service())
    assert await queues.service_summary(service.service_id, Party.RECIPIENT) == ServiceQueues(
        0, EMPTY_IDS_HASH
    )
    assert await queues.service_summary(new_id(), Party.NOTIFIER) == ServiceQueues()


async def test_the_figures_follow_associations_made_one_by_one(queues):
    svc = new_id()
    a, b, c = (make_record(notifier=make_notifier()) for _ in range(3))
    for rec in (a, b, c):
        await queues.add_queue(rec)
    await queues.set_service(a.recipient_id, Party.RECIPIENT, svc)
    await queues.set_service(b.recipient_id, Party.RECIPIENT, svc)
    await queues.set_service(c.recipient_id, Party.NOTIFIER, svc)
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(
        a.recipient_id, b.recipient_id
    )
    assert await queues.service_summary(svc, Party.NOTIFIER) == figures(c.notifier.notifier_id)
    await queues.set_service(a.recipient_id, Party.RECIPIENT, None)  # released
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(b.recipient_id)
    await queues.set_service(b.recipient_id, Party.RECIPIENT, new_id())  # taken by another
    assert await queues.service_summary(svc, Party.RECIPIENT) == ServiceQueues()


async def test_a_block_is_associated_in_one_call_with_a_result_per_queue(queues):
    svc = new_id()
    recs = [make_record() for _ in range(5)]
    for rec in recs:
        await queues.add_queue(rec)
    missing = new_id()
    ids = [r.recipient_id for r in recs]
    results = await queues.set_queues_service([*ids[:3], missing, *ids[3:]], Party.RECIPIENT, svc)
    assert results == [None, None, None, AUTH, None, None]
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(*ids)
    for rid in ids:
        assert (await queues.get_queue(Party.RECIPIENT, rid)).rcv_service_id == svc
    # associating again changes nothing; releasing in a block empties the figures
    assert await queues.set_queues_service(ids, Party.RECIPIENT, svc) == [None] * 5
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(*ids)
    assert await queues.set_queues_service(ids[:2], Party.RECIPIENT, None) == [None, None]
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(*ids[2:])


async def test_a_block_for_notifiers_refuses_a_queue_without_one(queues):
    svc = new_id()
    with_ntf, without = make_record(notifier=make_notifier()), make_record()
    await queues.add_queue(with_ntf)
    await queues.add_queue(without)
    ids = [with_ntf.recipient_id, without.recipient_id]
    assert await queues.set_queues_service(ids, Party.NOTIFIER, svc) == [None, AUTH]
    assert await queues.service_summary(svc, Party.NOTIFIER) == figures(
        with_ntf.notifier.notifier_id
    )


async def test_deleting_queues_and_notifiers_takes_them_out_of_the_figures(queues):
    svc = new_id()
    a = make_record(notifier=make_notifier(), rcv_service_id=svc, ntf_service_id=svc)
    b = make_record(notifier=make_notifier(), rcv_service_id=svc, ntf_service_id=svc)
    for rec in (a, b):
        await queues.add_queue(rec)  # created associated, as NEW in a service session
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(
        a.recipient_id, b.recipient_id
    )
    await queues.delete_queue(a.recipient_id)
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(b.recipient_id)
    assert await queues.service_summary(svc, Party.NOTIFIER) == figures(b.notifier.notifier_id)
    await queues.delete_notifier(b.recipient_id)
    assert await queues.service_summary(svc, Party.NOTIFIER) == ServiceQueues()
    assert await queues.service_summary(svc, Party.RECIPIENT) == figures(b.recipient_id)


async def test_a_new_notifier_leaves_the_old_ones_service(queues):
    svc = new_id()
    rec = make_record(notifier=make_notifier(), ntf_service_id=svc)
    await queues.add_queue(rec)
    await queues.add_notifier(rec.recipient_id, make_notifier())
    assert await queues.service_summary(svc, Party.NOTIFIER) == ServiceQueues()


async def test_a_services_queues_come_by_pages_in_id_order_each_once(queues):
    svc, other = new_id(), new_id()
    recs = [make_record(notifier=make_notifier()) for _ in range(7)]
    for rec in recs:
        await queues.add_queue(rec)
    rids = [r.recipient_id for r in recs]
    await queues.set_queues_service(rids, Party.RECIPIENT, svc)
    await queues.set_queues_service(rids[:4], Party.NOTIFIER, svc)
    await queues.add_queue(make_record(rcv_service_id=other))  # another service's queue
    first = await queues.service_queue_page(svc, Party.RECIPIENT, None, 3)
    assert first == sorted(rids)[:3]
    assert await queues.service_queue_page(svc, Party.RECIPIENT, first[-1], 3) == sorted(rids)[3:6]
    assert await queues.service_queue_page(svc, Party.RECIPIENT, sorted(rids)[5], 3) == [
        sorted(rids)[6]
    ]
    assert await queues.service_queue_page(svc, Party.RECIPIENT, max(rids), 3) == []
    # `after` need not be an id of the service's: the page starts past it
    assert await queues.service_queue_page(svc, Party.RECIPIENT, b"\x00", 10) == sorted(rids)
    # the notifier side pages by notifier id
    nids = sorted(r.notifier.notifier_id for r in recs[:4])
    assert await service_ids(queues, svc, Party.NOTIFIER, page=3) == nids
    assert await queues.service_queue_page(new_id(), Party.RECIPIENT, None, 5) == []


async def test_a_walk_by_pages_survives_changes_between_pages(queues):
    """What SUBS's walk relies on: a queue associated throughout comes exactly once;
    one released or deleted before the walk reaches it does not come at all."""
    svc = new_id()
    recs = [make_record() for _ in range(12)]
    for rec in recs:
        await queues.add_queue(rec)
    rids = sorted(r.recipient_id for r in recs)
    await queues.set_queues_service(rids, Party.RECIPIENT, svc)
    seen: list[bytes] = []
    page = await queues.service_queue_page(svc, Party.RECIPIENT, None, 4)
    seen += page
    released, deleted = rids[6], rids[9]  # both still ahead of the walk
    await queues.set_service(released, Party.RECIPIENT, None)
    await queues.delete_queue(deleted)
    await queues.set_service(rids[1], Party.RECIPIENT, None)  # one already walked past
    late = make_record(rcv_service_id=svc)  # associated during the walk
    await queues.add_queue(late)
    await queues.set_service(rids[2], Party.RECIPIENT, svc)  # again: no change
    while page := await queues.service_queue_page(svc, Party.RECIPIENT, seen[-1], 4):
        seen += page
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    throughout = [rid for rid in rids if rid not in (released, deleted, rids[1])]
    assert set(throughout) <= set(seen)
    assert released not in seen and deleted not in seen
    # the late queue comes if its id is past where the walk was when it came
    assert (late.recipient_id in seen) == (late.recipient_id > rids[3])


async def test_a_persistent_store_keeps_services_and_figures_across_a_reopen(
    persistent_queue_backend, store_path
):
    service = make_service()
    recs = [make_record(notifier=make_notifier()) for _ in range(4)]
    ids = [r.recipient_id for r in recs]
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.add_service(service) == service
        for rec in recs:
            await store.add_queue(rec)
        await store.set_queues_service(ids, Party.RECIPIENT, service.service_id)
        await store.set_queues_service(ids[:1], Party.NOTIFIER, service.service_id)
        await store.delete_queue(ids[3])
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.add_service(make_service(cert=service.cert)) == service
        assert await store.service_summary(service.service_id, Party.RECIPIENT) == figures(
            *ids[:3]
        )
        assert await store.service_summary(service.service_id, Party.NOTIFIER) == figures(
            recs[0].notifier.notifier_id
        )
        await store.set_service(ids[0], Party.RECIPIENT, None)
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.service_summary(service.service_id, Party.RECIPIENT) == figures(
            *ids[1:3]
        )
        assert await service_ids(store, service.service_id, Party.RECIPIENT) == sorted(ids[1:3])
        assert await service_ids(store, service.service_id, Party.NOTIFIER) == [
            recs[0].notifier.notifier_id
        ]
