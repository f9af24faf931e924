"""END / DELD encoding of pending events, per connection version."""

from __future__ import annotations

from memory_connections import connection

from router.protocol.codec import decode_response
from router.protocol.transmission import decode_transmission
from router.protocol.types import DELD, END
from router.server.core.subscriptions import (
    ClientSubscriptions,
    Event,
    PendingEvents,
    SubscriberRegistry,
    encode_events,
)


def decoded(transmissions: list[bytes]) -> list[tuple[bytes, bytes, object]]:
    out = []
    for raw in transmissions:
        t = decode_transmission(raw)
        out.append((t.corr_id, t.entity_id, decode_response(t.command)))
    return out


def never_subscribed(entity_id: bytes, notifier: bool) -> bool:
    return False


def test_a_deleted_queue_is_deld_at_version_10_and_end_at_version_9():
    events = [(b"q" * 24, Event.DELETED)]
    assert decoded(encode_events(10, events, never_subscribed)) == [(b"", b"q" * 24, DELD())]
    assert decoded(encode_events(9, events, never_subscribed)) == [(b"", b"q" * 24, END())]


def test_a_displaced_subscription_is_end_at_every_version():
    events = [(b"a" * 24, Event.END), (b"n" * 24, Event.NTF_END)]
    for version in (9, 10):
        assert [r for _, _, r in decoded(encode_events(version, events, never_subscribed))] == [
            END(), END()
        ]


def test_an_end_is_skipped_when_the_client_has_subscribed_again_since():
    def resubscribed(entity_id: bytes, notifier: bool) -> bool:
        return entity_id == b"a" * 24 and not notifier

    events = [(b"a" * 24, Event.END), (b"b" * 24, Event.END), (b"a" * 24, Event.NTF_END)]
    assert [e for _, e, _ in decoded(encode_events(10, events, resubscribed))] == [
        b"b" * 24, b"a" * 24
    ]


def test_the_registry_keeps_one_subscriber_per_queue_and_reports_who_was_displaced():
    registry = SubscriberRegistry()
    first, second = object(), object()
    assert registry.subscribe(b"q", first) is None  # type: ignore[arg-type]
    assert registry.subscribe(b"q", first) is None  # type: ignore[arg-type]
    assert registry.subscribe(b"q", second) is first  # type: ignore[arg-type]
    assert not registry.unsubscribe(b"q", first)  # type: ignore[arg-type]
    assert registry.get(b"q") is second
    assert registry.unsubscribe(b"q", second)  # type: ignore[arg-type]
    assert registry.get(b"q") is None and len(registry) == 0


async def test_a_client_with_a_full_send_channel_does_not_hold_up_the_events_of_others():
    events = PendingEvents(interval=0.01)
    full, free = connection(1), connection(2)
    full.push_nowait([b"filler"])  # trio.WouldBlock if it did not fit
    assert full.outbox_full()
    events.add(ClientSubscriptions(full), b"a" * 24, Event.END)
    events.add(ClientSubscriptions(free), b"b" * 24, Event.DELETED)
    events.flush()  # synchronous: it cannot wait for anyone
    [batch] = [free.take_pending()]
    assert decoded(batch) == [(b"", b"b" * 24, DELD())]
    # the full client's END waits for its own delivery task, in order
    assert decoded(full.overflow_events) == [(b"", b"a" * 24, END())]
    events.add(ClientSubscriptions(full), b"c" * 24, Event.END)
    events.flush()
    assert [e for _, e, _ in decoded(full.overflow_events)] == [b"a" * 24, b"c" * 24]
    assert len(events) == 0


async def test_an_end_that_found_the_send_channel_full_goes_before_what_is_pushed_after_it():
    """A later push (a SUB's answer taking the queue back, a MSG) never overtakes an
    END that waits for room: the client would read the END as the last word."""
    events = PendingEvents(interval=0.01)
    full = connection(1)
    full.push_nowait([b"filler"])
    events.add(ClientSubscriptions(full), b"a" * 24, Event.END)
    events.flush()
    assert full.take_pending() == [b"filler"]  # room again
    full.push_nowait([b"later"])
    pending = full.take_pending()
    assert decoded(pending[:1]) == [(b"", b"a" * 24, END())] and pending[1:] == [b"later"]
    assert not full.overflow_events
