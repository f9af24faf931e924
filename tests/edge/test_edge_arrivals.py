"""Arrivals (router/server/edge/arrivals.py): work arriving at once from many
connections is let in a few per pass of the scheduler, the oldest and the newest
first, and every arrival gets in. Passes are counted by a Trio instrument, never
timed."""

from __future__ import annotations

import socket

import trio

from router.server.edge.arrivals import Arrivals, arrivals, peer_gone


class PassCounter(trio.abc.Instrument):
    """The scheduler's passes, and what each let in (`mark` counts into the current one)."""

    def __init__(self) -> None:
        self.passes: list[int] = []
        self.current = 0

    def after_io_wait(self, timeout: float) -> None:
        self.current = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes.append(self.current)

    def mark(self) -> None:
        self.current += 1

    @property
    def index(self) -> int:
        """The number of the pass running now."""
        return len(self.passes)


async def _crowd(gate: Arrivals, counter: PassCounter, size: int, order: list[int]) -> None:
    async def arrive(i: int) -> None:
        await gate.admit()
        counter.mark()
        order.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(size):
            nursery.start_soon(arrive, i)


async def test_a_crowd_is_let_in_a_few_per_pass_and_all_of_it() -> None:
    gate, counter, order = Arrivals(per_pass=4), PassCounter(), []
    trio.lowlevel.add_instrument(counter)
    await _crowd(gate, counter, 40, order)
    trio.lowlevel.remove_instrument(counter)
    assert sorted(order) == list(range(40))
    assert max(counter.passes) <= 2 * 4
    assert sum(1 for n in counter.passes if n) >= 40 // 8
    assert gate.parked >= 40 - 4 and gate.waiting == 0


async def test_without_a_bound_the_same_crowd_is_one_pass() -> None:
    """What the bound changes: the counter sees a crowd pass when nobody waits."""
    gate, counter, order = Arrivals(per_pass=1000), PassCounter(), []
    trio.lowlevel.add_instrument(counter)
    await _crowd(gate, counter, 40, order)
    trio.lowlevel.remove_instrument(counter)
    assert max(counter.passes) == 40


async def test_an_arrival_after_a_crowd_gets_in_within_two_rounds() -> None:
    gate, counter = Arrivals(per_pass=4), PassCounter()
    trio.lowlevel.add_instrument(counter)
    let_in_at: dict[str, int] = {}

    async def arrive(name: str) -> None:
        await gate.admit()
        let_in_at[name] = counter.index

    async with trio.open_nursery() as nursery:
        for i in range(60):
            nursery.start_soon(arrive, f"crowd {i}")
        # the crowd parks in the first pass; the newcomer comes one pass later
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        arrived_at = counter.index
        nursery.start_soon(arrive, "newcomer")
    trio.lowlevel.remove_instrument(counter)
    crowd_done = max(at for name, at in let_in_at.items() if name != "newcomer")
    assert let_in_at["newcomer"] - arrived_at <= 3
    assert crowd_done - arrived_at >= 60 // 4 - 2  # the crowd was still being let in


async def test_the_oldest_get_in_as_newcomers_keep_coming() -> None:
    """Half of every round goes to the oldest: a stream of newcomers, more each pass
    than a round lets in, cannot keep the first crowd out."""
    gate = Arrivals(per_pass=4)
    let_in: set[int] = set()
    waves = 0

    async def arrive(i: int) -> None:
        await gate.admit()
        let_in.add(i)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(arrive, i)
        await trio.lowlevel.checkpoint()  # the crowd is in line before the first wave
        while not set(range(20)) <= let_in and waves < 30:
            for i in range(6):
                nursery.start_soon(arrive, 100 + 10 * waves + i)
            waves += 1
            await trio.lowlevel.checkpoint()
    # 16 of the first crowd wait, 2 of them let in per round
    assert set(range(20)) <= let_in
    assert waves <= 16 // 2 + 3


async def test_a_block_read_comes_before_a_crowd_joining_or_leaving() -> None:
    """A connected client's block is let in with the next round, ahead of a crowd of
    handshakes and teardowns that was in line before it."""
    gate, counter = Arrivals(per_pass=4), PassCounter()
    trio.lowlevel.add_instrument(counter)
    let_in_at: dict[str, int] = {}

    async def arrive(name: str, later: bool) -> None:
        await (gate.admit_later() if later else gate.admit())
        let_in_at[name] = counter.index

    async with trio.open_nursery() as nursery:
        for i in range(60):
            nursery.start_soon(arrive, f"leaving {i}", True)
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        asked_at = counter.index
        nursery.start_soon(arrive, "block", False)
        for i in range(20):  # newer than the block: a single line's newest half takes them
            nursery.start_soon(arrive, f"leaving late {i}", True)
    trio.lowlevel.remove_instrument(counter)
    assert let_in_at["block"] - asked_at <= 3
    assert max(let_in_at.values()) - asked_at >= 80 // 4 - 2  # the crowd was still in line
    assert len(let_in_at) == 81


async def test_the_later_line_keeps_a_share_while_blocks_keep_coming() -> None:
    """Blocks arriving faster than a round lets in cannot keep teardowns out."""
    gate = Arrivals(per_pass=4)
    let_in: set[str] = set()
    waves = 0

    async def arrive(name: str, later: bool) -> None:
        await (gate.admit_later() if later else gate.admit())
        let_in.add(name)

    leaving = {f"leaving {i}" for i in range(10)}
    async with trio.open_nursery() as nursery:
        for name in sorted(leaving):
            nursery.start_soon(arrive, name, True)
        await trio.lowlevel.checkpoint()
        while not leaving <= let_in and waves < 30:
            for i in range(6):
                nursery.start_soon(arrive, f"block {waves} {i}", False)
            waves += 1
            await trio.lowlevel.checkpoint()
    # one place of every round of 4 is the later line's while it waits
    assert leaving <= let_in
    assert waves <= 10 + 3


async def test_a_cancelled_arrival_leaves_the_line() -> None:
    gate = Arrivals(per_pass=1)
    await gate.admit()  # the round's one place
    with trio.move_on_after(0):  # cancelled while parked
        await gate.admit()
    assert gate.waiting == 0
    await gate.admit()  # the next round lets the next arrival in


async def test_a_place_after_a_read_is_no_cancellation_point() -> None:
    """What was read must not be lost: cancelled while it waits, the arrival still
    gets its place; the cancellation comes at its next checkpoint."""
    gate = Arrivals(per_pass=1)
    await gate.admit()  # the round's one place
    got_in = False
    with trio.CancelScope() as scope:
        scope.cancel()
        await gate.admit_after_pass()
        got_in = True
        await trio.lowlevel.checkpoint()
    assert got_in and scope.cancelled_caught and gate.waiting == 0


async def test_a_place_in_a_free_round_costs_no_pass() -> None:
    gate, counter = Arrivals(per_pass=4), PassCounter()
    trio.lowlevel.add_instrument(counter)
    before = counter.index
    for _ in range(3):
        await gate.admit()
    assert counter.index == before
    trio.lowlevel.remove_instrument(counter)


async def test_the_run_has_one() -> None:
    assert arrivals() is arrivals()


def test_a_peer_is_gone_only_once_nothing_is_left_before_its_end() -> None:
    """What a crowd leaving is told apart by (`Arrivals.admit_read`): a look at the
    socket that leaves what there is to read in it."""

    router_side, peer = socket.socketpair()
    router_side.setblocking(False)
    with router_side, peer:
        assert not peer_gone(router_side)  # nothing yet
        peer.sendall(b"a block")
        assert not peer_gone(router_side)
        peer.shutdown(socket.SHUT_WR)
        assert not peer_gone(router_side)  # its bytes first
        assert router_side.recv(100) == b"a block"
        assert peer_gone(router_side)


async def test_would_wait_says_whether_an_arrival_now_would_wait() -> None:
    gate = Arrivals(per_pass=2)
    assert not gate.would_wait()
    await gate.admit()
    assert not gate.would_wait()
    await gate.admit()
    assert gate.would_wait()  # the round's places are taken
    await trio.lowlevel.checkpoint()  # a new round
    await trio.lowlevel.checkpoint()
    assert not gate.would_wait()
