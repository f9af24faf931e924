"""Hand-offs with two workers in one process (`workers/in_process.py`), each on a port
of its own, so that a test chooses the worker each client lands on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio
import trio.testing

from router.client import MessageEvent, open_client
from router.protocol.block import MAX_TRANSMISSION_SIZE
from router.protocol.types import ProtocolError
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers.channel import Frame
from router.server.workers.handoff import (
    _PART_DONE,
    BLOCK,
    OUT,
    OUT_ANSWERED,
    OUT_FRAME_BYTES,
    OUT_TAKEN,
    TAKEN_TOLD_AT,
    WINDOW,
    ShadowTransport,
    _split,
)
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)


async def test_many_large_messages_reach_a_subscriber_on_the_other_worker() -> None:
    """SUBs of many queues with large waiting messages, from a client of the other
    worker: every message is delivered, once, and the subscriptions are the owner's."""
    queues = 120
    body = bytes(range(256)) * 58  # ~15 KB: a block per MSG
    async with (
        workers_in_process(CONFIG) as (owner, front),
        open_client(owner.address) as sender,
        open_client(front.address) as recipient,
    ):
        made = [await sender.create_queue(snd_secure=False) for _ in range(queues)]
        assert {Ownership(2, 0).owner_of(q.recipient_id) for q in made} == {0}
        for n, queue in enumerate(made):
            await sender.send(queue.sender_id, body + b"%d" % n)
        assert not any(await recipient.subscribe_many(made))
        received: dict[bytes, bytes] = {}
        with trio.fail_after(30):
            while len(received) < queues:
                event = await recipient.next_event()
                assert isinstance(event, MessageEvent)
                received[event.recipient_id] = event.body
        assert received == {q.recipient_id: body + b"%d" % n for n, q in enumerate(made)}
        # The shadow of the recipient lives in worker 0, not in worker 1.
        assert len(owner.router.subscriptions) == queues
        assert len(front.router.subscriptions) == 0


async def test_the_writes_a_front_takes_are_given_back_in_bulk_never_more(
        monkeypatch) -> None:
    """A recipient on the front ACKs each MSG its shadow wrote: the front gives the
    writes it took back to the shadow's window in the credit of its next block (the
    ACK) or in an OUT_TAKEN for several, not in a frame per write, and never gives back
    more than it took (the window that bounds a slow client's shadow stays WINDOW)."""
    sent: list[Frame] = []
    header = Frame.header

    def recording(frame: Frame) -> bytes:  # each frame's header is made once, to be sent
        sent.append(frame)
        return header(frame)

    monkeypatch.setattr(Frame, "header", recording)
    async with (
        workers_in_process(CONFIG) as (owner, front),
        open_client(owner.address) as sender,
        open_client(front.address) as recipient,
    ):
        # Three queues: two MSGs' writes are given back in an OUT_TAKEN, the third's
        # with an ACK.
        made = [await sender.create_queue(snd_secure=False) for _ in range(3)]
        assert {Ownership(2, 0).owner_of(q.recipient_id) for q in made} == {0}
        assert not any(await recipient.subscribe_many(made))
        by_id = {q.recipient_id: q for q in made}
        with trio.fail_after(30):
            for round_ in range(6):
                for n, queue in enumerate(made):
                    await sender.send(queue.sender_id, b"%d-%d" % (round_, n))
                for _ in made:
                    event = await recipient.next_event()
                    assert isinstance(event, MessageEvent)
                    await recipient.ack(by_id[event.recipient_id], event.msg_id)
    writes = [f for f in sent if f.kind == OUT]  # within the window: to be given back
    given_back = [f for f in sent if f.kind in (BLOCK, OUT_TAKEN) and f.credit]
    assert len(writes) >= 12
    credits = sum(f.credit for f in given_back)
    assert len(writes) - TAKEN_TOLD_AT < credits <= len(writes)
    assert any(f.kind == BLOCK for f in given_back)
    assert sum(f.kind == OUT_TAKEN for f in sent) < len(writes) / 2


class _RecordingLinks:
    def __init__(self) -> None:
        self.frames: list[Frame] = []

    async def send(self, peer: int, frame: Frame) -> None:
        self.frames.append(frame)


async def test_a_shadow_write_larger_than_a_frame_goes_in_several_within_the_window() -> None:
    links = _RecordingLinks()
    handoff = SimpleNamespace(links=links)
    shadow = ShadowTransport(handoff, 1, 7, "test")  # type: ignore[arg-type]
    # What the connection's write gives it (`ShadowTransport.pack`): the transmissions.
    transmissions = [bytes([n]) * 15_000 for n in range(200)]  # ~3 MB
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shadow.send_blocks, transmissions)
        taken = 0
        with trio.fail_after(10):
            while True:
                await trio.testing.wait_all_tasks_blocked()
                sent = len(links.frames)
                assert sent - taken <= WINDOW  # never more than the window untaken
                if sent == taken:
                    break
                shadow.taken(sent - taken)  # told in bulk, as a front does
                taken = sent
    assert len(links.frames) > 1 and all(f.kind == OUT and f.conn_id == 7 for f in links.frames)
    assert all(len(f.payload) <= OUT_FRAME_BYTES + 16_384 for f in links.frames)
    written = [t for f in links.frames for t in _split(f.payload)]
    assert written == [bytes([n]) * 15_000 for n in range(200)]


async def test_a_blocks_answers_from_another_worker_take_no_block_of_their_own() -> None:
    """A block of SUBs of queues of both workers is answered in as many blocks as the
    front's own share alone would be: the shadow's answers go out with the front's
    last ones, not in writes of their own (the shadow's costly part pauses, and
    writes its answers so far at each pause, dispatch.py)."""
    async with (
        workers_in_process(CONFIG) as (other, front),
        open_client(other.address) as maker_elsewhere,
        open_client(front.address) as maker_here,
        open_client(front.address) as recipient,
    ):
        # A NEW without short-link data is the queue of the worker that received it.
        elsewhere = [await maker_elsewhere.create_queue(snd_secure=False) for _ in range(20)]
        here = [await maker_here.create_queue(snd_secure=False) for _ in range(40)]
        assert {Ownership(2, 0).owner_of(q.recipient_id) for q in elsewhere} == {0}
        assert {Ownership(2, 0).owner_of(q.recipient_id) for q in here} == {1}

        async def blocks_answering(queues: list) -> int:
            before = recipient.statistics()
            assert not any(await recipient.subscribe_many(queues))
            after = recipient.statistics()
            assert after.blocks_sent - before.blocks_sent == 1
            return after.blocks_received - before.blocks_received

        alone = await blocks_answering(here[:20])
        assert await blocks_answering(here[20:] + elsewhere) == alone
        assert len(other.router.subscriptions) == 20 and len(front.router.subscriptions) == 40


class _RecordingLinksNow(_RecordingLinks):
    def send_nowait(self, peer: int, frame: Frame) -> bool:
        self.frames.append(frame)
        return True


async def test_a_shadow_holds_its_writes_while_it_works_on_a_part() -> None:
    """What a shadow writes while `holding` (a costly part's answers at each pause)
    goes in the frame of the part's last answers, in order; a write made at once
    (`send_blocks_now`) is one frame within the window, else held for the next write."""
    links = _RecordingLinksNow()
    shadow = ShadowTransport(SimpleNamespace(links=links), 1, 7, "test")  # type: ignore[arg-type]
    shadow.holding = True
    await shadow.send_blocks([b"a", b"b"])
    await shadow.send_blocks([b"c"])
    assert links.frames == []
    shadow.holding = False
    await shadow.send_blocks([b"d"])
    assert [list(_split(f.payload)) for f in links.frames] == [[b"a", b"b", b"c", b"d"]]
    assert shadow.can_send_now() and shadow.send_blocks_now([b"e"])
    for _ in range(WINDOW - 2):
        assert shadow.send_blocks_now([b"f"])
    assert not shadow.can_send_now()  # the window is full: nothing more at once
    assert not shadow.send_blocks_now([b"g"])  # held
    assert len(links.frames) == WINDOW
    shadow.taken(1)
    await shadow.send_blocks([b"h"])
    assert list(_split(links.frames[-1].payload)) == [b"g", b"h"]
    # A part answered: the last frame of the write that follows goes outside the full
    # window, once, and is never taken back.
    shadow.parts_answered = 1
    with trio.fail_after(5):
        await shadow.send_blocks([b"i"])
    assert links.frames[-1].kind == OUT_ANSWERED and shadow.parts_answered == 0
    assert not shadow.can_send_now()


async def test_parts_waiting_together_at_a_shadow_are_answered_in_one_frame(monkeypatch):
    """Two blocks of a pipelining client for the other worker's queues that reach its
    shadow before it is served are answered in one frame back (as one process writes a
    pipelining client's answers in one block), each part's end marked."""
    async with (
        workers_in_process(CONFIG) as (owner, front),
        open_client(owner.address) as maker,
        open_client(front.address) as client,
    ):
        queue = await maker.create_queue(snd_secure=False)
        await client.send(queue.sender_id, b"the shadow made")
        shadow = next(conn.transport for conn in owner.router.connections.values()
                      if isinstance(conn.transport, ShadowTransport))
        links, back = shadow._handoff.links, []
        send, send_nowait = links.send, links.send_nowait

        async def recording(peer: int, frame: Frame) -> None:
            back.append(frame)
            await send(peer, frame)

        def recording_nowait(peer: int, frame: Frame) -> bool:
            back.append(frame)
            return send_nowait(peer, frame)

        monkeypatch.setattr(links, "send", recording)
        monkeypatch.setattr(links, "send_nowait", recording_nowait)
        shadow._busy = True  # as while a task serves it: the blocks wait for it
        async with trio.open_nursery() as nursery:
            for n in range(2):  # a block each
                nursery.start_soon(client.send, queue.sender_id, b"%d" % n)
                with trio.fail_after(5):
                    while len(shadow._blocks or ()) <= n:
                        await trio.sleep(0.01)
            shadow._busy = False
            shadow._start()
        answered = [f for f in back if f.kind in (OUT, OUT_ANSWERED)]
        assert len(answered) == 1
        assert list(_split(answered[0].payload)).count(_PART_DONE) == 2
        assert (await maker.info(queue))["qiSize"] == 3  # every SEND stored


async def test_a_shadow_about_to_wait_sends_the_parts_it_answered() -> None:
    """Parts answered and held for the next one's answers go to the front, outside the
    window, as soon as the pass would wait (for a store, a turn, its window), not after."""
    links = _RecordingLinksNow()
    shadow = ShadowTransport(SimpleNamespace(links=links), 1, 7, "test")  # type: ignore[arg-type]
    shadow.holding = True
    await shadow.send_blocks([b"a", _PART_DONE])
    shadow.release_answered()
    assert links.frames == []  # nothing of a part answered yet: the part's own writes wait
    shadow.parts_answered = 1
    shadow.release_answered()
    assert [(f.kind, list(_split(f.payload))) for f in links.frames] == [
        (OUT_ANSWERED, [b"a", _PART_DONE])]
    assert shadow.parts_answered == 0 and shadow.can_send_now() is False  # still holding
    shadow.release_answered()
    assert len(links.frames) == 1


def test_a_block_goes_by_its_entity_ids_without_its_commands_taken_apart(monkeypatch):
    """A block is split by owner in one pass: SUBs, SENDs, ACKs and the like go by their
    entity id, and only commands whose first bytes may be a tag that is no one owner's
    (PING, the proxy's, SUBS / NSUBS, LGET / LKEY: here NSUB, by its first four bytes)
    are taken apart to be told (`Handoff._owner`); each still goes where it belongs."""
    from router.protocol.block import encode_batches
    from router.protocol.transmission import encode_transmission
    from router.protocol.types import Transmission
    from router.protocol.versions import SMP_VERSION_MAX
    from router.server.workers.handoff import Handoff

    version = SMP_VERSION_MAX
    ownership = Ownership(2, 0)
    ids = {}
    for n in range(64):
        entity_id = n.to_bytes(1, "big") * 24
        ids.setdefault(ownership.owner_of(entity_id), entity_id)
    mine, theirs = ids[0], ids[1]

    def raw(corr_id: bytes, entity_id: bytes, command: bytes) -> bytes:
        return encode_transmission(Transmission(b"", corr_id, entity_id, command), version)

    block_of = [raw(b"1", mine, b"SUB"), raw(b"2", theirs, b"SUB"),
                raw(b"3", theirs, b"SEND  hello"), raw(b"4", mine, b"ACK \x01m"),
                raw(b"5", b"", b"PING"), raw(b"6", theirs, b"NSUB"),
                raw(b"7", theirs, b"DEL")]
    handoff = Handoff(ownership, "test-split")
    asked: list[bytes] = []
    told = handoff._owner
    monkeypatch.setattr(handoff, "_owner", lambda t, *rest: asked.append(t) or told(t, *rest))
    conn = SimpleNamespace(version=version, service_id=None)
    split = handoff._split(conn, encode_batches(block_of)[0])  # type: ignore[arg-type]
    assert split is not None
    parts, gathered, contacts = split
    assert parts == {0: [block_of[0], block_of[3], block_of[4]],
                     1: [block_of[1], block_of[2], block_of[5], block_of[6]]}
    assert not gathered and not contacts
    assert asked == [block_of[4], block_of[5]]
    # A block all of this worker's is answered as in one process.
    assert handoff._split(conn, encode_batches([block_of[0], block_of[4]])[0]) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [10, 16])
def test_a_transmission_read_in_place_goes_where_its_full_reading_sends_it(version: int) -> None:
    """`Handoff._split` reads the usual transmission's entity id in place; every
    other one (a service signature, an id moved from another count of workers, an
    entity id of another size, one cut short) goes where `_owner`'s full reading
    sends it, as in a block of only it."""
    from router.protocol.block import encode_batches
    from router.protocol.transmission import encode_transmission
    from router.protocol.types import Transmission
    from router.server.workers.handoff import Handoff

    def raw(entity_id: bytes, *, signed: bool = True, service_sig: bytes | None = None,
            command: bytes = b"SUB") -> bytes:
        return encode_transmission(Transmission(
            b"s" * 64 if signed else b"", b"c" * 24, entity_id, command,
            service_sig=service_sig), version)

    theirs, mine, moved = b"\x01" * 24, b"\x02" * 24, b"\x03" * 24
    exceptions = {moved: 1 - Ownership(2, 0).owner_of(moved)}
    ownership = Ownership(2, 0, exceptions)
    assert ownership.owner_of(theirs) == 1 and ownership.owner_of(mine) == 0
    block_of = [raw(theirs), raw(mine), raw(theirs, signed=False), raw(moved),
                raw(theirs[:20]), raw(theirs, command=b""), raw(theirs)[:60]]
    if version >= 16:
        block_of.append(raw(theirs, service_sig=b"v" * 64))
    handoff = Handoff(ownership, "test-split-in-place")
    conn = SimpleNamespace(version=version, service_id=None)
    split = handoff._split(conn, encode_batches(block_of)[0])  # type: ignore[arg-type]
    assert split is not None
    expected: dict[int, list[bytes]] = {}
    for t in block_of:
        expected.setdefault(handoff._owner(t, version, False, {}), []).append(t)
    assert split[0] == expected
    assert block_of[3] in expected[exceptions[moved]]
    assert [t for t in expected[1] if t is not block_of[3]] == [
        block_of[0], block_of[2], block_of[5], *block_of[7:]]
    assert [t for t in expected[0] if t is not block_of[3]] == [
        block_of[1], block_of[4], block_of[6]]


def test_a_part_goes_as_batch_contents_that_hold_its_transmissions_in_order() -> None:
    """What a front sends an owner (`_contents`): unpadded batches, as many as the
    block's rule needs, that a shadow takes apart into the same transmissions."""
    from router.protocol.block import BLOCK_SIZE, MAX_CONTENT, decode_batch_content
    from router.server.workers.handoff import _contents

    part = [bytes([n % 251]) * 120 for n in range(50)]
    (content,) = _contents(part)
    assert len(content) < BLOCK_SIZE // 2 and decode_batch_content(content) == part
    large = [bytes([n]) * 3_000 for n in range(12)]  # ~36 KB: three blocks' worth
    contents = _contents(large)
    assert len(contents) == 3 and all(len(c) <= MAX_CONTENT for c in contents)
    assert [t for c in contents for t in decode_batch_content(c)] == large


async def test_a_shadow_refuses_a_transmission_no_block_holds() -> None:
    """A shadow's writes go to its front unpacked (`ShadowTransport.pack`); one that no
    block could hold is refused in the shadow, as packing it would, not in the front."""
    links = _RecordingLinksNow()
    shadow = ShadowTransport(SimpleNamespace(links=links), 1, 7, "test")  # type: ignore[arg-type]
    too_large = b"x" * (MAX_TRANSMISSION_SIZE + 1)
    with pytest.raises(ProtocolError):
        await shadow.send_blocks([b"a", too_large])
    with pytest.raises(ProtocolError):
        shadow.send_blocks_now([too_large])
    assert links.frames == []
    await shadow.send_blocks([b"a", b"x" * MAX_TRANSMISSION_SIZE])
    assert list(_split(links.frames[0].payload)) == [b"a", b"x" * MAX_TRANSMISSION_SIZE]
