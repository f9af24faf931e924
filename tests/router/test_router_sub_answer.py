"""A SUB answers with its queue's head itself: while it reads the head, nothing else
pushes that queue to its connection (docs/protocol.md#behaviour).

Each test holds the SUB's read of the head after the store answered it (as a slow
store or a busy scheduler would), lets a SEND land meanwhile, and then checks what
the client reads: the SUB's OK comes first, the head (if any) once, with it or
after it, and a message the SUB's read could not see is still pushed. Before the
SUB held the queue, the SEND's trigger pushed the head again ahead of the SUB's
OK: a client that had read OK as "no message" then saw the message it held come
back after it acknowledged it.
"""

from __future__ import annotations

from contextlib import contextmanager

import trio
from smp_session import Queue, Reply, Session, connect

from router.protocol.block import BatchPacker
from router.protocol.types import END, MSG, OK, PING, PONG, SUB


class HeldRead:
    """The next `peek_message` of one queue, held after the store answered it."""

    def __init__(self, recipient_id: bytes) -> None:
        self.recipient_id = recipient_id
        self.armed = True
        self.entered = trio.Event()
        self.released = trio.Event()


@contextmanager
def hold_next_read(monkeypatch, router, recipient_id: bytes):
    held = HeldRead(recipient_id)
    store_class = type(router.messages)
    peek = store_class.peek_message

    async def held_peek(store, rid: bytes):
        msg = await peek(store, rid)
        if held.armed and rid == held.recipient_id:
            held.armed = False
            held.entered.set()
            await held.released.wait()
        return msg

    monkeypatch.setattr(store_class, "peek_message", held_peek)
    yield held


async def _sub_with_a_send_meanwhile(
    router, monkeypatch, recipient: Session, sender: Session, q: Queue, body: bytes
) -> list[Reply]:
    """SUB, with `body` sent while the SUB's read of the head is held; what the
    recipient reads up to and including the SUB's answer, then what follows it."""
    with hold_next_read(monkeypatch, router, q.recipient_id) as held:
        sub = recipient.transmission(q.recipient_id, SUB(), q.rcv_seed)
        await recipient.send_block(_block(sub))
        await held.entered.wait()
        await sender.send(q.sender_id, body)
        held.released.set()
        replies: list[Reply] = []
        while not any(r.corr_id for r in replies):
            replies += await recipient.receive()
    return replies


def _block(raw: bytes) -> bytes:
    packer = BatchPacker()
    assert packer.add(raw)
    return packer.take_block()


async def _pushed_before_pong(recipient: Session) -> list[Reply]:
    """Whatever the router pushed before it answered a PING."""
    assert await recipient.command(b"", PING()) == PONG()
    events = list(recipient.events)
    recipient.events.clear()
    return events


async def test_sub_again_answers_with_the_head_and_nothing_pushes_it_ahead(
    router, monkeypatch
):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as sender:
            q = await recipient.create_queue(subscribe=True)
            await sender.send(q.sender_id, b"first")
            held, _ = await recipient.next_message(q)  # in flight, not acknowledged
            replies = await _sub_with_a_send_meanwhile(
                router, monkeypatch, recipient, sender, q, b"second"
            )
            assert replies[0].corr_id and replies[0].response == OK(), replies
            later = replies[1:] + await _pushed_before_pong(recipient)
            msgs = [r.response for r in later if isinstance(r.response, MSG)]
            assert [m.msg_id for m in msgs] == [held.msg_id], later
            assert len(later) == 1, later


async def test_a_write_the_subs_read_missed_is_pushed_after_the_subs_answer(
    router, monkeypatch
):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as sender:
            q = await recipient.create_queue()
            replies = await _sub_with_a_send_meanwhile(
                router, monkeypatch, recipient, sender, q, b"late"
            )
            assert replies[0].corr_id and replies[0].response == OK(), replies
            pushed = replies[1:] or [await recipient.next_event()]
            assert len(pushed) == 1 and isinstance(pushed[0].response, MSG), pushed
            assert q.open(pushed[0].response).body == b"late"
            assert await recipient.no_more_events()


async def test_an_end_due_while_a_block_is_answered_follows_that_blocks_answers(
    router, monkeypatch
):
    """Another client takes the queue while this client's SUB of it is being
    answered: the client reads the SUB's OK first and the END after it, so the END
    is the last word on the queue, as it is in the router."""
    with trio.fail_after(10):
        async with connect(router) as first, connect(router) as second:
            q = await first.create_queue()
            with hold_next_read(monkeypatch, router, q.recipient_id) as held:
                sub = first.transmission(q.recipient_id, SUB(), q.rcv_seed)
                await first.send_block(_block(sub))
                await held.entered.wait()
                assert await second.recipient(q, SUB()) == OK()
                await trio.sleep(router.config.end_batch_interval * 3)  # the END is due
                held.released.set()
                replies: list[Reply] = []
                while len(replies) < 2:
                    replies += await first.receive()
            assert [r.response for r in replies] == [OK(), END()], replies
            assert replies[0].corr_id and not replies[1].corr_id


@contextmanager
def hold_reads_of(monkeypatch, router, recipient_id: bytes, count: int):
    """Hold each of the next `count` reads of the head of `recipient_id` (alone or in
    a batch) after the store answered it, until its `released` is set."""
    holds = [HeldRead(recipient_id) for _ in range(count)]
    store_class = type(router.messages)
    peek, peek_many = store_class.peek_message, store_class.peek_messages
    reads = iter(holds)

    async def hold_if_wanted(ids) -> None:
        if recipient_id in ids and (held := next(reads, None)) is not None:
            held.entered.set()
            await held.released.wait()

    async def held_peek(store, rid: bytes):
        msg = await peek(store, rid)
        await hold_if_wanted([rid])
        return msg

    async def held_peek_many(store, rids):
        heads = await peek_many(store, rids)
        await hold_if_wanted(rids)
        return heads

    monkeypatch.setattr(store_class, "peek_message", held_peek)
    monkeypatch.setattr(store_class, "peek_messages", held_peek_many)
    yield holds


async def test_a_push_made_before_its_queue_was_taken_is_not_written_after_its_end(
    router, monkeypatch
):
    """The delivery task pushes the heads of two queues; while it reads them, another
    client takes the first queue, and the first client gets END. The first client
    never reads that queue's message after its END: it went to the new holder only
    (one message in flight at one connection)."""
    with trio.fail_after(10):
        async with (
            connect(router) as first, connect(router) as second, connect(router) as sender,
        ):
            q1, q2 = await first.create_queue(), await first.create_queue()
            with hold_reads_of(monkeypatch, router, q2.recipient_id, 2) as (sub_read, held):
                # The SUBs' read misses the two writes, so the delivery task pushes
                # both heads after the answers, reading them (the second read).
                packer = BatchPacker()
                for q in (q1, q2):
                    assert packer.add(first.transmission(q.recipient_id, SUB(), q.rcv_seed))
                await first.send_block(packer.take_block())
                await sub_read.entered.wait()
                await sender.send(q1.sender_id, b"one")
                await sender.send(q2.sender_id, b"two")
                sub_read.released.set()
                await held.entered.wait()
                assert await second.recipient(q1, SUB()) == OK()  # with "one"
                await trio.sleep(router.config.end_batch_interval * 3)  # the END is due
                held.released.set()
                pushed = list(first.events) + await _pushed_before_pong(first)
            after_end = pushed[[r.response for r in pushed].index(END()) + 1:]
            assert all(r.entity_id != q1.recipient_id for r in after_end), pushed
            msg, body = await second.next_message(q1)
            assert body.body == b"one"
