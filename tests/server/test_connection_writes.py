"""The receive loop's writes (core/connection.py): answers to a block whose next block is
in already wait for that block's answers and leave in one write; without a next block,
or when the next block has no answers, they are written all the same."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from router.protocol.block import BLOCK_SIZE, decode_batch
from router.server.core.connection import Connection
from router.server.edge.block_stream import TransportClosed
from router.server.edge.handshake import Handshake


class ScriptedTransport:
    """Blocks the client has sent, all in already (`block_ready` says so while one is
    left); after the last, the client is silent (or leaves, with `leave_after`)."""

    def __init__(self, blocks: list[bytes], *, tells_ready: bool = True,
                 leave_after: bool = True) -> None:
        self.incoming = list(blocks)
        self.tells_ready = tells_ready
        self.leave_after = leave_after
        self.writes: list[list[bytes]] = []  # each write: its blocks
        self.written = trio.Event()
        self.remote = "scripted"
        self.stalled = False
        self.web_challenge = None

    def block_ready(self) -> bool:
        return self.tells_ready and bool(self.incoming)

    async def receive_block(self) -> bytes:
        if self.incoming:  # in already: no wait (as the WebSocket and TLS transports)
            return self.incoming.pop(0)
        await trio.lowlevel.checkpoint()
        if self.leave_after:
            raise TransportClosed("peer closed the connection")
        await trio.sleep_forever()
        raise AssertionError

    async def send_block(self, block: bytes) -> None:
        await self.send_blocks([block])

    async def send_blocks(self, blocks: list[bytes]) -> None:
        assert all(len(block) == BLOCK_SIZE for block in blocks)
        self.writes.append(blocks)
        self.written.set()

    def established(self) -> None:
        pass

    async def aclose(self, timeout: float) -> None:
        pass


class AnswerEach:
    """Each block is answered with its first byte, as a transmission of its own, unless
    it is in `silent`; at once, as the memory store's SEND and ACK are (a pause in
    between would let the delivery task write the answers left waiting)."""

    def __init__(self, silent: tuple[bytes, ...] = ()) -> None:
        self.silent = silent

    async def process_block(self, client: object, block: bytes) -> list[bytes]:
        key = block[:1]
        return [] if key in self.silent else [b"answer " + key]

    async def delivery_loop(self, client: object) -> None:
        pass

    def answered(self, client: object) -> None:
        pass


def block(key: bytes) -> bytes:
    return key.ljust(BLOCK_SIZE, b"#")


def connection(transport: ScriptedTransport) -> Connection:
    handshake = Handshake(10, b"s" * 32, None)
    return Connection(1, transport, handshake, send_queue_size=4)  # type: ignore[arg-type]


async def serve(conn: Connection, handler: AnswerEach) -> None:
    """`conn.run` as the listener calls it: in a scope of its own, with a nursery for
    the helper tasks it starts (the delivery task writing answers left waiting)."""
    async with trio.open_nursery() as helpers:
        with trio.CancelScope() as scope:
            await conn.run(handler, None, scope, helpers)


def transmissions(writes: list[list[bytes]]) -> list[list[bytes]]:
    return [[t for b in blocks for t in decode_batch(b)] for blocks in writes]


async def test_answers_to_blocks_read_together_leave_in_one_write():
    transport = ScriptedTransport([block(b"a"), block(b"b"), block(b"c")])
    with trio.fail_after(10):
        await serve(connection(transport), AnswerEach())
    assert transmissions(transport.writes) == [[b"answer a", b"answer b", b"answer c"]]
    assert len(transport.writes[0]) == 1  # packed into one block


async def test_a_transport_that_cannot_tell_gets_a_write_per_block():
    transport = ScriptedTransport([block(b"a"), block(b"b")], tells_ready=False)
    with trio.fail_after(10):
        await serve(connection(transport), AnswerEach())
    assert transmissions(transport.writes) == [[b"answer a"], [b"answer b"]]


async def test_answers_left_waiting_are_written_when_the_next_block_has_none():
    transport = ScriptedTransport([block(b"a"), block(b"b")], leave_after=False)
    conn = connection(transport)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, conn, AnswerEach(silent=(b"b",)))
            await transport.written.wait()
            nursery.cancel_scope.cancel()
    assert transmissions(transport.writes) == [[b"answer a"]]


class CountingDeliveries(AnswerEach):
    """AnswerEach that counts the delivery task's runs."""

    def __init__(self, silent: tuple[bytes, ...] = ()) -> None:
        super().__init__(silent)
        self.delivery_runs = 0

    async def delivery_loop(self, client: object) -> None:
        self.delivery_runs += 1


async def test_held_answers_cost_no_delivery_task_when_nothing_waits():
    transport = ScriptedTransport([block(b"a"), block(b"b"), block(b"c")], leave_after=False)
    conn = connection(transport)
    handler = CountingDeliveries(silent=(b"c",))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, conn, handler)
            await transport.written.wait()
            nursery.cancel_scope.cancel()
    # a's and b's answers held while c was read and answered (with none), then written
    # by the receive loop itself
    assert transmissions(transport.writes) == [[b"answer a", b"answer b"]]
    assert handler.delivery_runs == 0


class WaitsOn(AnswerEach):
    """Answering the block `key` waits until `go` is set."""

    def __init__(self, key: bytes) -> None:
        super().__init__()
        self.key = key
        self.go = trio.Event()

    async def process_block(self, client: object, block: bytes) -> list[bytes]:
        if block[:1] == self.key:
            await self.go.wait()
        return await super().process_block(client, block)


async def a_then_b_in_two_writes(transport: ScriptedTransport, handler: AnswerEach,
                                 after_first: Callable[[], None] = lambda: None) -> None:
    """Serve blocks a and b: a's answers must be written alone before b's (then
    `after_first` lets b's answering go on)."""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, connection(transport), handler)
            await transport.written.wait()
            assert transmissions(transport.writes) == [[b"answer a"]]
            transport.written = trio.Event()
            after_first()
            await transport.written.wait()
            nursery.cancel_scope.cancel()
    assert transmissions(transport.writes) == [[b"answer a"], [b"answer b"]]


async def test_held_answers_are_written_when_answering_the_next_block_waits():
    # The second block waits for something that comes only once the first block's
    # answers are out: they must not wait with it (a turn, a commit, a proxied slot).
    handler = WaitsOn(b"b")
    await a_then_b_in_two_writes(
        ScriptedTransport([block(b"a"), block(b"b")], leave_after=False), handler,
        handler.go.set)


class ReadyButWaits(ScriptedTransport):
    """Says a block is in while the next read still waits (as a transport that has a
    ping in before the block would, were the pong's write to wait)."""

    def block_ready(self) -> bool:
        return True

    async def receive_block(self) -> bytes:
        if len(self.incoming) == 1:
            await trio.sleep(0.05)
        return await super().receive_block()


async def test_held_answers_are_written_when_reading_the_next_block_waits():
    await a_then_b_in_two_writes(
        ReadyButWaits([block(b"a"), block(b"b")], leave_after=False), AnswerEach())


class FailsAfterWaiting(AnswerEach):
    async def process_block(self, client: object, block: bytes) -> list[bytes]:
        if block[:1] == b"b":
            await trio.lowlevel.checkpoint()
            raise TransportClosed("gone while answering")
        return await super().process_block(client, block)


async def test_an_error_after_a_wait_with_answers_held_ends_the_connection():
    transport = ScriptedTransport([block(b"a"), block(b"b")], leave_after=False)
    conn = connection(transport)
    with trio.fail_after(10):
        await serve(conn, FailsAfterWaiting())
    assert conn.close_reason == "gone while answering"


async def test_a_connection_cancelled_while_answering_with_answers_held_ends():
    transport = ScriptedTransport([block(b"a"), block(b"b")], leave_after=False)
    conn = connection(transport)
    handler = WaitsOn(b"b")
    with trio.fail_after(10):
        async with trio.open_nursery() as helpers:
            with trio.CancelScope() as scope:
                helpers.start_soon(_cancel_once_written, transport, scope)
                await conn.run(handler, None, scope, helpers)
    assert scope.cancelled_caught
    assert transmissions(transport.writes) == [[b"answer a"]]


async def _cancel_once_written(transport: ScriptedTransport, scope: trio.CancelScope) -> None:
    await transport.written.wait()
    scope.cancel()


class AnswersElsewhere(CountingDeliveries):
    """Answering the block `b` waits for answers of another worker's (`go`), as a
    front's hand-off does (workers/handoff.py), with `answers_elsewhere` set; `pushes`
    are left for the client meanwhile (a MSG of a queue of this worker)."""

    def __init__(self, conn_of: Callable[[], Connection], pushes: int) -> None:
        super().__init__()
        self.conn_of = conn_of
        self.pushes = pushes
        self.waiting = trio.Event()
        self.go = trio.Event()

    async def process_block(self, client: object, block: bytes) -> list[bytes]:
        if block[:1] == b"b":
            conn = self.conn_of()
            conn.answers_elsewhere = True
            try:
                self.waiting.set()
                for n in range(self.pushes):
                    conn.leave([b"push %d" % n])
                    await trio.lowlevel.checkpoint()
                await self.go.wait()
            finally:
                conn.answers_elsewhere = False
        return await super().process_block(client, block)


async def test_what_waits_with_answers_elsewhere_goes_out_with_them():
    transport = ScriptedTransport([block(b"a"), block(b"b")], leave_after=False)
    conn = connection(transport)
    handler = AnswersElsewhere(lambda: conn, pushes=2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, conn, handler)
            await handler.waiting.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert transport.writes == []  # a's answers held, the pushes pending
            handler.go.set()
            await transport.written.wait()
            nursery.cancel_scope.cancel()
    assert transmissions(transport.writes) == [
        [b"answer a", b"push 0", b"push 1", b"answer b"]]
    assert handler.delivery_runs == 0


async def test_a_full_pending_list_is_written_while_answers_are_elsewhere():
    # Its room bounds what waits (a shadow's writes wait for it: workers/handoff.py).
    transport = ScriptedTransport([block(b"b")], leave_after=False)
    conn = connection(transport)  # 4 batches pending at most
    handler = AnswersElsewhere(lambda: conn, pushes=4)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, conn, handler)
            await transport.written.wait()
            assert not handler.go.is_set()
            assert transmissions(transport.writes) == [[b"push %d" % n for n in range(4)]]
            handler.go.set()
            while len(transport.writes) < 2:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert transmissions(transport.writes)[1] == [b"answer b"]


class PackingTransport(ScriptedTransport):
    """A transport that takes its writes as transmissions (`pack`), as a shadow's does
    (workers/handoff.py): the connection hands them over as they are, unpadded."""

    @staticmethod
    def pack(transmissions: list[bytes]) -> list[bytes]:
        return transmissions

    async def send_blocks(self, blocks: list[bytes]) -> None:
        self.writes.append(blocks)
        self.written.set()


async def test_a_transport_that_packs_its_writes_gets_the_transmissions_as_they_are():
    transport = PackingTransport([block(b"a"), block(b"b")])
    with trio.fail_after(10):
        await serve(connection(transport), AnswerEach())
    assert transport.writes == [[b"answer a", b"answer b"]]  # one write, nothing padded
