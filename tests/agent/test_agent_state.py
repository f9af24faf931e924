"""The subscription table on its own: sessions, PENDING / ACTIVE, stale answers."""

from __future__ import annotations

import pytest

from router.client import RecipientQueue
from router.client.agent_state import QueueState, SubscriptionTable
from router.protocol.types import AUTH, INTERNAL

KEY = ("smp://router", None)
OTHER = ("smp://router", "group")


def queue(n: int) -> RecipientQueue:
    rid = bytes([n]) * 24
    return RecipientQueue(rid, rid, b"s" * 32, b"k" * 44, b"d" * 32, b"v" * 44, b"b" * 32, True)


def rid(n: int) -> bytes:
    return bytes([n]) * 24


def subscribed_table(*ns: int) -> tuple[SubscriptionTable, int]:
    table = SubscriptionTable()
    table.add(KEY, [queue(n) for n in ns])
    session = table.start_session(KEY)
    table.take_batch(KEY, session, 100)
    table.subscribed(KEY, session, [(rid(n), None) for n in ns])
    return table, session


def test_added_queues_are_pending_and_sent_in_batches_in_the_order_added():
    table = SubscriptionTable()
    assert table.add(KEY, [queue(1), queue(2), queue(3)]) == [rid(1), rid(2), rid(3)]
    assert table.add(KEY, [queue(2)]) == []
    session = table.start_session(KEY)
    first = table.take_batch(KEY, session, 2)
    assert [q.recipient_id for q in first] == [rid(1), rid(2)]
    assert [q.recipient_id for q in table.take_batch(KEY, session, 2)] == [rid(3)]
    assert table.take_batch(KEY, session, 2) == []
    assert table.state(rid(1)) is QueueState.PENDING


def test_an_ok_answer_makes_a_queue_active_and_is_reported_up_only_once():
    table = SubscriptionTable()
    table.add(KEY, [queue(1)])
    session = table.start_session(KEY)
    table.take_batch(KEY, session, 10)
    assert table.subscribed(KEY, session, [(rid(1), None)]).up == (rid(1),)
    assert table.subscribed(KEY, session, [(rid(1), None)]).up == ()
    assert table.state(rid(1)) is QueueState.ACTIVE
    assert table.counts() == (0, 1)


def test_losing_a_session_reports_down_only_the_queues_that_were_active():
    table, session = subscribed_table(1, 2)
    table.add(KEY, [queue(3)])  # added while connected, not answered yet
    table.take_batch(KEY, session, 10)
    assert table.lose_session(KEY, session) == (rid(1), rid(2))
    assert table.lose_session(KEY, session) == ()
    assert table.counts() == (3, 0)


def test_a_new_session_sends_again_everything_that_was_pending_or_active():
    table, session = subscribed_table(1, 2)
    table.add(KEY, [queue(3)])
    table.lose_session(KEY, session)
    new = table.start_session(KEY)
    assert new != session
    sent = {q.recipient_id for q in table.take_batch(KEY, new, 10)}
    assert sent == {rid(1), rid(2), rid(3)}


def test_answers_from_a_replaced_session_change_nothing():
    table = SubscriptionTable()
    table.add(KEY, [queue(1)])
    old = table.start_session(KEY)
    table.take_batch(KEY, old, 10)
    table.lose_session(KEY, old)
    new = table.start_session(KEY)
    assert table.subscribed(KEY, old, [(rid(1), None)]).up == ()
    assert table.state(rid(1)) is QueueState.PENDING
    # Still to be sent in the new session, and then its own answer counts.
    assert [q.recipient_id for q in table.take_batch(KEY, new, 10)] == [rid(1)]
    assert table.subscribed(KEY, new, [(rid(1), None)]).up == (rid(1),)


def test_an_answer_for_a_queue_not_sent_in_the_current_session_is_ignored():
    table = SubscriptionTable()
    table.add(KEY, [queue(1)])
    session = table.start_session(KEY)
    assert table.subscribed(KEY, session, [(rid(1), None)]).up == ()  # never sent
    assert table.take_batch(KEY, session, 10)
    assert table.subscribed(KEY, session + 1, [(rid(1), None)]).up == ()  # no such session
    assert table.state(rid(1)) is QueueState.PENDING


def test_end_in_the_current_session_removes_the_queue_and_end_from_an_old_one_does_not():
    table, old = subscribed_table(1, 2)
    assert table.ended(KEY, old, rid(1))
    assert table.state(rid(1)) is None
    table.lose_session(KEY, old)
    new = table.start_session(KEY)
    assert not table.ended(KEY, old, rid(2))  # the old connection's END
    assert table.state(rid(2)) is QueueState.PENDING
    table.take_batch(KEY, new, 10)
    assert table.ended(KEY, new, rid(2))


def test_end_before_the_sub_answer_is_applied_still_removes_the_queue():
    table = SubscriptionTable()
    table.add(KEY, [queue(1)])
    session = table.start_session(KEY)
    table.take_batch(KEY, session, 10)
    assert table.ended(KEY, session, rid(1))
    assert table.subscribed(KEY, session, [(rid(1), None)]).up == ()
    assert table.state(rid(1)) is None


def test_messages_are_current_only_for_wanted_queues_of_the_current_session():
    table, session = subscribed_table(1)
    assert table.holds(KEY, session, rid(1))
    assert not table.holds(KEY, session, rid(9))
    table.lose_session(KEY, session)
    assert not table.holds(KEY, session, rid(1))
    new = table.start_session(KEY)
    assert not table.holds(KEY, new, rid(1))  # its SUB is not sent yet
    table.take_batch(KEY, new, 10)
    assert table.holds(KEY, new, rid(1))
    table.remove(rid(1))
    assert not table.holds(KEY, new, rid(1))


def test_a_permanent_error_removes_the_queue_and_a_temporary_one_sends_it_again():
    table = SubscriptionTable()
    table.add(KEY, [queue(1), queue(2)])
    session = table.start_session(KEY)
    table.take_batch(KEY, session, 10)
    results = table.subscribed(KEY, session, [(rid(1), AUTH), (rid(2), INTERNAL)])
    assert results.refused == ((rid(1), AUTH),) and results.retry == (rid(2),)
    assert table.state(rid(1)) is None and table.state(rid(2)) is QueueState.PENDING
    assert table.take_batch(KEY, session, 10) == []
    assert table.resend(KEY, session, [rid(2)])
    assert [q.recipient_id for q in table.take_batch(KEY, session, 10)] == [rid(2)]
    assert not table.resend(KEY, session + 1, [rid(2)])


def test_a_queue_cannot_be_held_under_two_session_keys():
    table = SubscriptionTable()
    table.add(KEY, [queue(1)])
    with pytest.raises(ValueError):
        table.add(OTHER, [queue(2), queue(1)])
    assert table.key_of(rid(2)) is None  # nothing of the refused call was added
    table.remove(rid(1))
    assert table.add(OTHER, [queue(1)]) == [rid(1)]
    assert table.key_of(rid(1)) == OTHER
