"""What many connections bring at once, taken in a few per pass of the scheduler.

Theory of operation. Trio runs, in one pass of its scheduler, every task that
became ready since the last: when a crowd of connections is readable at once
(a reconnect storm's SUB blocks, thousands of clients closing, thousands of
TLS handshakes after a restart), every one of their tasks runs in that one
pass, each paying for its read (the TLS record decrypted, the block copied
without its padding, its pace read: ~55-80 us on the shared 2-CPU machine),
its close or its handshake. A PING arriving meanwhile waits for the whole
pass: 2,000 arriving blocks were one pass of ~120 ms of CPU
(bench/RESULTS.md, "Reconnect storm").

So such work asks for a place first (`Arrivals.admit`): a pass gives
`PER_PASS` places. A task that finds them taken parks, holding nothing but its
socket's unread bytes (the kernel keeps them), and a clock task, woken only
while tasks wait, opens a new round each pass, letting in up to `PER_PASS` of
them: half the oldest, so that every arrival gets in within a bounded number
of passes, and half the newest, so that what arrives after a crowd (another
client's PING) is taken in the next pass rather than behind the whole crowd.
A round's free places are taken at once, without a pass through the
scheduler: a router that is not crowded pays a counter per block, and every
`PER_PASS` blocks one step of the clock.

A pass therefore runs at most 2 x `PER_PASS` arrivals (those let in by the
last round and free places of a round opened in it) and one parking step for
each task that arrived meanwhile: no read, ~12 us each in the storm against
~60-80 us a read. Trio wakes every task whose socket became readable in the
same pass, so that pass still grows with the crowd, five times more slowly.

Two lines: what connected clients send (`admit`, `admit_after_pass`: a block
read) comes before what joins or leaves the router (`admit_later`: a TLS
handshake, the hello, taking a connection apart), so that a client's PING is
not read behind thousands of connections leaving or arriving at once. The
later line keeps a quarter of each round's places while it has waiting tasks,
so neither line waits without bound. A connection whose peer has gone (its end,
with nothing before it, seen with a look at the socket while arrivals wait:
`admit_read`) takes the later line already for the read that finds its end, not
only for its teardown: thousands of clients dropping their connections at once
are not read ahead of another client's PING.

There is one `Arrivals` per Trio run (`arrivals()`): the places are the
scheduler's, which every connection of every router in the run shares.
"""

from __future__ import annotations

import socket
from collections import OrderedDict

import trio
from trio.lowlevel import Abort, RunVar, Task

PER_PASS = 16  # arrivals taken in per pass of the scheduler (plus those of the last round)


class Arrivals:
    """Places for arriving work, `per_pass` per pass of the scheduler (module doc)."""

    __slots__ = ("per_pass", "_taken", "_waiting", "_later", "_clock", "_clock_idle",
                 "rounds", "parked")

    def __init__(self, per_pass: int = PER_PASS) -> None:
        self.per_pass = per_pass
        self._taken = 0  # places given in this round
        # Oldest first; a cancelled arrival leaves from anywhere in O(1).
        self._waiting: OrderedDict[Task, None] = OrderedDict()  # blocks of connected clients
        self._later: OrderedDict[Task, None] = OrderedDict()  # handshakes, hellos, teardowns
        self._clock: Task | None = None  # the task that opens the rounds
        self._clock_idle = False  # parked until a round is needed
        self.rounds = 0  # rounds the clock opened (tests, benchmarks)
        self.parked = 0  # arrivals that waited for a round

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._later)

    def would_wait(self) -> bool:
        """Whether an arrival now would wait for a round (in either line)."""
        return self._taken >= self.per_pass or bool(self._waiting) or bool(self._later)

    async def admit(self) -> None:
        """Return once this arrival has a place: at once, without yielding, if this
        round has one left and nobody waits; else after a round lets it in."""
        if self._taken < self.per_pass and not self._waiting:
            self._taken += 1
            if self._taken == self.per_pass:
                self._need_round()  # the next pass opens a new one
            return
        await self._park()

    async def admit_read(self, sock: socket.socket) -> None:
        """`admit` for a read from `sock`, which has become readable; while arrivals
        wait, `admit_later` if its peer has gone with nothing left to read (the read
        would find the connection's end: a teardown, not a block)."""
        if self.would_wait() and peer_gone(sock):
            await self.admit_later()
        else:
            await self.admit()

    async def admit_after_pass(self) -> None:
        """`admit`, after letting the scheduler's other tasks run if it would not
        wait: for a read that found its bytes in already, so that a connection that
        keeps its socket full takes one place per pass, not all of them. Not a
        cancellation point (what was read must not be lost): a cancelled task still
        waits for its round, which comes within a bounded number of passes."""
        if self._taken < self.per_pass and not self._waiting:
            self._taken += 1
            if self._taken == self.per_pass:
                self._need_round()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await self._park(cancellable=False)

    async def admit_later(self) -> None:
        """`admit` for work that joins or leaves the router (a handshake, a hello, a
        teardown): a free place only if nobody waits in either line, else behind the
        blocks of connected clients (module doc)."""
        if self._taken < self.per_pass and not self._waiting and not self._later:
            self._taken += 1
            if self._taken == self.per_pass:
                self._need_round()
            return
        await self._park(line=self._later)

    async def _park(
        self, cancellable: bool = True, line: OrderedDict[Task, None] | None = None
    ) -> None:
        task = trio.lowlevel.current_task()
        waiting = self._waiting if line is None else line
        waiting[task] = None
        self.parked += 1
        self._need_round()

        def abort(_: object) -> Abort:
            if not cancellable:
                return Abort.FAILED
            del waiting[task]  # a cancelled connection leaves the line
            return Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _need_round(self) -> None:
        if self._clock is None:
            self._clock = trio.lowlevel.spawn_system_task(self._rounds, name="arrivals clock")
        elif self._clock_idle:
            self._clock_idle = False
            trio.lowlevel.reschedule(self._clock)

    async def _rounds(self) -> None:
        """The clock: one round per pass while needed, then it parks. It runs first in
        the pass after it was woken (or spawned), so that pass is a new round."""
        while True:
            self.rounds += 1
            self._taken = self._let_in()
            if self._waiting or self._later or self._taken:
                # Those let in run in the next pass: it is their round.
                await trio.lowlevel.cancel_shielded_checkpoint()
                continue
            self._clock_idle = True
            await trio.lowlevel.wait_task_rescheduled(lambda _: Abort.SUCCEEDED)

    def _let_in(self) -> int:
        """Reschedule up to `per_pass` waiting tasks, the oldest and the newest of each
        line in turn: the later line's share a quarter of the places while it waits,
        and whatever the other line leaves."""
        later_share = min(len(self._later), max(1, self.per_pass // 4))
        let_in = _let_in_from(self._waiting, self.per_pass - later_share)
        return let_in + _let_in_from(self._later, self.per_pass - let_in)


def _let_in_from(waiting: OrderedDict[Task, None], places: int) -> int:
    let_in = 0
    while waiting and let_in < places:
        task, _ = waiting.popitem(last=let_in % 2 == 1)
        trio.lowlevel.reschedule(task)
        let_in += 1
    return let_in


def peer_gone(sock: socket.socket) -> bool:
    """Whether the socket's peer has closed it with nothing left to read (a look, not a
    read: what there is stays in the kernel for the read)."""
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset: the read says so


_ARRIVALS: RunVar[Arrivals] = RunVar("arrivals")


def arrivals() -> Arrivals:
    """The Trio run's `Arrivals` (made on first use)."""
    try:
        return _ARRIVALS.get()
    except LookupError:
        made = Arrivals()
        _ARRIVALS.set(made)
        return made
