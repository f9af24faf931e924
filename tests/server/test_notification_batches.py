"""The NMSG store and its batched flush, with connections that have no socket."""

from __future__ import annotations

import trio
from memory_connections import connection

from router.protocol import crypto
from router.protocol.codec import decode_response
from router.protocol.transmission import decode_transmission
from router.protocol.types import NMSG
from router.server.core.notifications import Notifications
from router.server.core.subscriptions import SubscriberRegistry
from store.interfaces import Message, NotifierCreds

NOW = 1_700_000_000


def creds(n: int) -> NotifierCreds:
    return NotifierCreds(bytes([n]) * 24, b"k", bytes([n]) * 32)


def message(n: int, ts: int = NOW) -> Message:
    return Message(bytes([n]) * 24, ts, b"T", b"body")


def opened(batch: list[bytes], c: NotifierCreds) -> list[tuple[bytes, int]]:
    """(msgId, ts) of each NMSG in a batch, checking it is for `c`'s notifier."""
    out = []
    for raw in batch:
        t = decode_transmission(raw)
        nmsg = decode_response(t.command)
        assert isinstance(nmsg, NMSG) and t.entity_id == c.notifier_id and t.corr_id == b""
        out.append(crypto.decrypt_ntf_meta(c.rcv_ntf_dh_secret, nmsg.nonce, nmsg.enc_meta))
    return out


def setup(**kwargs: object) -> tuple[Notifications, SubscriberRegistry]:
    registry = SubscriberRegistry()
    return Notifications(registry.get, 0.01, clock=lambda: NOW, **kwargs), registry  # type: ignore


async def test_notifications_wait_for_a_subscriber_and_go_out_in_one_batch_after_nsub():
    ntfs, registry = setup()
    c, conn = creds(1), connection(1)
    ntfs.notify(c, message(1))
    ntfs.notify(c, message(2))
    ntfs.flush()
    assert ntfs.pending(c.notifier_id) == 2  # nobody subscribed: kept
    registry.subscribe(c.notifier_id, conn)
    ntfs.subscribed(c.notifier_id)
    ntfs.flush()
    assert opened(conn.take_pending(), c) == [(b"\1" * 24, NOW), (b"\2" * 24, NOW)]
    assert len(ntfs) == 0 and ntfs.sent == 2


async def test_each_nmsg_has_its_own_random_nonce():
    ntfs, registry = setup()
    c, conn = creds(1), connection(1)
    registry.subscribe(c.notifier_id, conn)
    ntfs.notify(c, message(1))
    ntfs.notify(c, message(1))
    ntfs.flush()
    nonces = {
        decode_response(decode_transmission(t).command).nonce  # type: ignore[union-attr]
        for t in conn.take_pending()
    }
    assert len(nonces) == 2


async def test_a_connection_with_a_full_send_channel_keeps_its_nmsgs_and_others_get_theirs():
    ntfs, registry = setup()
    full, free = connection(1), connection(2)
    c_full, c_free = creds(1), creds(2)
    registry.subscribe(c_full.notifier_id, full)
    registry.subscribe(c_free.notifier_id, free)
    full.push_nowait([b"filler"])  # trio.WouldBlock if it did not fit
    assert full.outbox_full()
    ntfs.notify(c_full, message(1))
    ntfs.notify(c_free, message(2))
    ntfs.flush()  # synchronous: it cannot wait for anyone
    assert opened(free.take_pending(), c_free) == [(b"\2" * 24, NOW)]
    assert ntfs.pending(c_full.notifier_id) == 1 and not full.overflow_events
    assert full.take_pending() == [b"filler"]  # the client reads again
    ntfs.flush()
    assert opened(full.take_pending(), c_full) == [(b"\1" * 24, NOW)]


async def test_nmsgs_of_all_notifiers_of_one_connection_go_in_one_batch():
    ntfs, registry = setup()
    conn = connection(1)
    all_creds = [creds(n) for n in range(1, 6)]
    for c in all_creds:
        registry.subscribe(c.notifier_id, conn)
        ntfs.notify(c, message(c.notifier_id[0]))
    ntfs.flush()
    batch = conn.take_pending()
    assert len(batch) == 5
    assert {decode_transmission(t).entity_id for t in batch} == {
        c.notifier_id for c in all_creds
    }


async def test_the_pending_nmsgs_of_a_notifier_are_bounded_and_the_oldest_go_first():
    ntfs, registry = setup(max_pending=3)
    c, conn = creds(1), connection(1)
    for n in range(1, 6):
        ntfs.notify(c, message(n))
    assert ntfs.pending(c.notifier_id) == 3 and ntfs.dropped == 2
    registry.subscribe(c.notifier_id, conn)
    ntfs.subscribed(c.notifier_id)
    ntfs.flush()
    assert [m for m, _ in opened(conn.take_pending(), c)] == [
        bytes([n]) * 24 for n in (3, 4, 5)
    ]


def test_notifications_older_than_the_ttl_expire():
    ntfs, _ = setup(ttl=100)
    c = creds(1)
    ntfs.notify(c, message(1, ts=NOW - 101))
    ntfs.notify(c, message(2, ts=NOW - 50))
    assert ntfs.expire() == 1
    assert ntfs.pending(c.notifier_id) == 1


async def test_forgetting_a_notifier_drops_its_nmsgs():
    ntfs, registry = setup()
    c, conn = creds(1), connection(1)
    registry.subscribe(c.notifier_id, conn)
    ntfs.notify(c, message(1))
    assert ntfs.forget(c.notifier_id) == 1
    ntfs.flush()
    assert len(ntfs) == 0
    assert conn.take_pending() == []


async def test_the_flush_task_sends_a_batch_after_the_window():
    ntfs, registry = setup()
    c, conn = creds(1), connection(1)
    registry.subscribe(c.notifier_id, conn)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ntfs.run)
            ntfs.notify(c, message(1))
            while not (batch := conn.take_pending()):  # left for its writer
                await trio.sleep(0.005)
            nursery.cancel_scope.cancel()
    assert opened(batch, c) == [(b"\1" * 24, NOW)]


async def test_a_notifier_of_a_service_goes_to_the_services_holder_else_to_its_subscriber():
    service_id = b"s" * 24
    holders: dict[bytes, object] = {}
    ntfs, registry = setup(service_holder=holders.get)
    c, own, holder = creds(1), connection(1), connection(2)
    registry.subscribe(c.notifier_id, own)  # its service-signed NSUB, on another connection
    ntfs.notify(c, message(1), service_id)
    ntfs.flush()
    assert opened(own.take_pending(), c) == [(b"\1" * 24, NOW)]  # no NSUBS holder: its own
    ntfs.notify(c, message(2), service_id)
    holders[service_id] = holder  # NSUBS
    ntfs.service_subscribed(service_id)
    ntfs.flush()
    assert opened(holder.take_pending(), c) == [(b"\2" * 24, NOW)]
    assert own.take_pending() == []
    ntfs.notify(c, message(3))  # the queue left the service (an unsigned NSUB)
    ntfs.flush()
    assert opened(own.take_pending(), c) == [(b"\3" * 24, NOW)]
