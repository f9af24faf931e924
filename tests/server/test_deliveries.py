"""The deliveries map: oldest message first, one entry per queue with its key, never
overwritten."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.server.core.pending_pushes import Deliveries


def rid(n: int) -> bytes:
    return n.to_bytes(24, "big")


def key(n: int) -> bytes:
    return b"key %d" % n


def queue(n: int) -> tuple[bytes, bytes]:
    """What `pop_oldest` returns for queue `n`: its id and its key."""
    return rid(n), key(n)


def test_pop_oldest_returns_queues_in_message_time_order():
    d = Deliveries()
    d.add(rid(1), 300, key(1))
    d.add(rid(2), 100, key(2))
    d.add(rid(3), 200, key(3))
    assert [d.pop_oldest() for _ in range(3)] == [queue(2), queue(3), queue(1)]
    assert not d


def test_queues_with_the_same_timestamp_leave_in_insertion_order():
    d = Deliveries()
    for n in (5, 3, 9, 1):
        d.add(rid(n), 42, key(n))
    assert [d.pop_oldest() for _ in range(4)] == [queue(5), queue(3), queue(9), queue(1)]


def test_adding_a_queue_that_is_already_waiting_keeps_the_older_entry():
    d = Deliveries()
    assert d.add(rid(1), 10, key(1))
    d.add(rid(2), 20, key(2))
    assert not d.add(rid(1), 30, b"another key")
    assert d.timestamp(rid(1)) == 10
    assert len(d) == 2
    assert d.pop_oldest() == queue(1)


def test_the_map_never_holds_more_entries_than_distinct_queues():
    d = Deliveries()
    for i in range(10_000):
        d.add(rid(i % 100), i, key(i % 100))
    assert len(d) == 100


def test_pop_oldest_on_an_empty_map_raises_key_error():
    with pytest.raises(KeyError):
        Deliveries().pop_oldest()


def test_discard_forgets_a_queue_and_reports_whether_it_was_there():
    d = Deliveries()
    d.add(rid(1), 1, key(1))
    d.add(rid(2), 2, key(2))
    assert d.discard(rid(1))
    assert not d.discard(rid(1))
    assert rid(1) not in d and rid(2) in d
    assert d.pop_oldest() == queue(2)


def test_a_discarded_queue_can_be_added_again_with_a_new_time():
    d = Deliveries()
    d.add(rid(1), 5, key(1))
    d.add(rid(2), 7, key(2))
    d.discard(rid(1))
    d.add(rid(1), 9, key(1))
    assert [d.pop_oldest(), d.pop_oldest()] == [queue(2), queue(1)]


def test_clear_empties_the_map():
    d = Deliveries()
    d.add(rid(1), 1, key(1))
    d.clear()
    assert len(d) == 0 and rid(1) not in d


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 20), st.integers(0, 5)),
        st.tuples(st.just("pop"), st.just(0), st.just(0)),
        st.tuples(st.just("discard"), st.integers(0, 20), st.just(0)),
    ),
    max_size=200,
)


@given(operations)
def test_the_map_behaves_like_a_list_of_first_insertions_sorted_by_time(ops):
    d = Deliveries()
    model: list[tuple[int, int, bytes]] = []  # (ts, seq, rid), the obvious implementation
    for seq, (op, n, ts) in enumerate(ops):
        if op == "add":
            fresh = all(entry[2] != rid(n) for entry in model)
            assert d.add(rid(n), ts, key(n)) == fresh
            if fresh:
                model.append((ts, seq, rid(n)))
        elif op == "discard":
            present = [entry for entry in model if entry[2] == rid(n)]
            assert d.discard(rid(n)) == bool(present)
            model = [entry for entry in model if entry[2] != rid(n)]
        elif model:
            oldest = min(model)
            model.remove(oldest)
            assert d.pop_oldest() == (oldest[2], key(int.from_bytes(oldest[2], "big")))
        else:
            with pytest.raises(KeyError):
                d.pop_oldest()
        assert len(d) == len(model)


def test_an_empty_map_holds_no_collection_and_gives_them_back_once_emptied():
    d = Deliveries()
    assert d._order is None and d._entries is None and not d and len(d) == 0
    assert rid(1) not in d and not d.discard(rid(1)) and d.timestamp(rid(1)) is None
    d.add(rid(1), 10, key(1))
    d.add(rid(2), 20, key(2))
    assert d._order is not None and len(d) == 2
    assert d.pop_oldest() == queue(1) and d.discard(rid(2))
    assert d._order is None and d._entries is None and not d
    with pytest.raises(KeyError):
        d.pop_oldest()
