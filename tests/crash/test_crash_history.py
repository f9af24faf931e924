"""The crash history checker, on hand-made histories: one that keeps every rule, and
one per rule that breaks exactly that rule."""

from __future__ import annotations

from crash_history import History, Outcome, check

Q, R = b"q" * 24, b"r" * 24
OK, ERROR, UNKNOWN = Outcome.OK, Outcome.ERROR, Outcome.UNKNOWN


def mid(name: str) -> bytes:
    return name.encode().ljust(24, b".")


def sent(h: History, body: bytes, outcome: Outcome, run: int = 0, queue: bytes = Q) -> None:
    h.send_answered(h.send_started(queue, body, run), outcome)


def rules(h: History) -> list[str]:
    return [v.rule for v in check(h)]


def test_a_history_with_a_crash_redelivery_and_lost_answers_keeps_every_rule():
    h = History()
    sent(h, b"a", OK)
    sent(h, b"b", OK)
    h.delivered(Q, mid("a"), b"a", 0)
    h.acked(Q, mid("a"))
    h.delivered(Q, mid("b"), b"b", 0)  # in flight when the router dies
    h.send_started(Q, b"c", 0)  # no answer: stored or not, both are fine
    h.send_started(Q, b"lost-in-the-crash", 0)
    sent(h, b"other queue", OK, queue=R)
    # run 1: the unacknowledged message again, with its id, then the rest in order
    h.delivered(Q, mid("b"), b"b", 1)
    h.acked(Q, mid("b"))
    h.delivered(Q, mid("c"), b"c", 1)
    sent(h, b"d", OK, run=1)
    sent(h, b"refused", ERROR, run=1)
    h.delivered(Q, mid("d"), b"d", 1)
    h.delivered(R, mid("o"), b"other queue", 1)
    assert check(h) == []


def test_a_message_answered_ok_and_never_delivered_is_lost():
    h = History()
    sent(h, b"a", OK)
    assert rules(h) == ["lost"]


def test_a_delivery_of_something_never_sent_is_a_phantom():
    h = History()
    h.delivered(Q, mid("x"), b"x", 0)
    assert rules(h) == ["phantom"]


def test_a_message_sent_to_another_queue_delivered_here_is_a_phantom():
    h = History()
    sent(h, b"a", OK, queue=R)
    h.delivered(R, mid("a"), b"a", 0)
    h.delivered(Q, mid("a2"), b"a", 0)
    assert rules(h) == ["phantom"]


def test_a_message_answered_err_must_not_be_delivered():
    h = History()
    sent(h, b"a", ERROR)
    h.delivered(Q, mid("a"), b"a", 0)
    assert rules(h) == ["refused"]


def test_a_message_delivered_again_after_a_restart_must_keep_its_msg_id():
    h = History()
    sent(h, b"a", OK)
    h.delivered(Q, mid("a"), b"a", 0)
    h.delivered(Q, mid("a-renamed"), b"a", 1)
    assert rules(h) == ["msg_id"]


def test_one_msg_id_must_not_name_two_messages():
    h = History()
    sent(h, b"a", OK)
    sent(h, b"b", OK)
    h.delivered(Q, mid("same"), b"a", 0)
    h.acked(Q, mid("same"))
    h.delivered(Q, mid("same"), b"b", 0)
    assert "msg_id" in rules(h)


def test_a_message_sent_after_another_was_answered_must_not_overtake_it():
    h = History()
    sent(h, b"a", OK)
    sent(h, b"b", OK)
    h.delivered(Q, mid("b"), b"b", 0)
    h.delivered(Q, mid("a"), b"a", 0)
    assert rules(h) == ["order"]


def test_a_message_of_an_earlier_run_must_not_be_overtaken_even_without_an_answer():
    h = History()
    h.send_started(Q, b"a", 0)  # the router died before answering, but stored it
    sent(h, b"b", OK, run=1)
    h.delivered(Q, mid("b"), b"b", 1)
    h.delivered(Q, mid("a"), b"a", 1)
    assert rules(h) == ["order"]


def test_concurrent_sends_may_be_delivered_in_either_order():
    h = History()
    a = h.send_started(Q, b"a", 0)
    b = h.send_started(Q, b"b", 0)  # sent before a was answered
    h.send_answered(a, OK)
    h.send_answered(b, OK)
    h.delivered(Q, mid("b"), b"b", 0)
    h.delivered(Q, mid("a"), b"a", 0)
    assert check(h) == []


def test_order_only_binds_messages_of_the_same_queue():
    h = History()
    sent(h, b"a", OK, queue=R)
    sent(h, b"b", OK)
    h.delivered(Q, mid("b"), b"b", 0)
    h.delivered(R, mid("a"), b"a", 0)
    assert check(h) == []


def test_a_message_whose_ack_was_answered_must_never_come_again():
    h = History()
    sent(h, b"a", OK)
    h.delivered(Q, mid("a"), b"a", 0)
    h.acked(Q, mid("a"))
    h.delivered(Q, mid("a"), b"a", 1)
    assert rules(h) == ["acked_again"]


def test_a_message_whose_ack_got_no_answer_may_come_again():
    h = History()
    sent(h, b"a", OK)
    h.delivered(Q, mid("a"), b"a", 0)  # ACK sent, the router died before answering
    h.delivered(Q, mid("a"), b"a", 1)
    assert check(h) == []


def test_outcome_counts_for_the_report():
    h = History()
    sent(h, b"a", OK)
    sent(h, b"b", ERROR)
    h.send_started(Q, b"c", 0)
    assert (h.count(OK), h.count(ERROR), h.count(UNKNOWN)) == (1, 1, 1)
