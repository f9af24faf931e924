"""The memory store's cap counts what a message costs in memory, not its body: the
accounted bytes are at least what tracemalloc sees the messages take."""

from __future__ import annotations

import os
import tracemalloc

from store.interfaces import Message, WriteResult
from store.memory.stores import MemoryMessageStore

COUNT = 2000


def _traced_growth(fill) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _message(n: int, body: bytes) -> Message:
    # As the router makes them: a fresh id, time and body per message.
    return Message(os.urandom(24), 1_700_000_000 + n, b"T", bytes(body))


def test_empty_messages_in_one_queue_cost_at_most_what_is_accounted():
    store = MemoryMessageStore()
    rid = os.urandom(24)

    def fill() -> None:
        for n in range(COUNT):
            assert store.write_message_nowait(rid, _message(n, b""), COUNT) in (
                WriteResult.STORED, WriteResult.STORED_INTO_EMPTY)

    assert _traced_growth(fill) <= store.stored_bytes()


def test_one_message_per_queue_costs_at_most_what_is_accounted():
    store = MemoryMessageStore()

    def fill() -> None:
        for n in range(COUNT):
            store.write_message_nowait(os.urandom(24), _message(n, b"x" * 10), 10)

    assert _traced_growth(fill) <= store.stored_bytes()
