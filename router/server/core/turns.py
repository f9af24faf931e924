"""What a block costs, and the turns in which costly blocks are worked on.

Theory of operation. Trio runs every ready task once per pass of its scheduler,
and a task runs until it yields. A client's PING is answered after two or
three such passes (its read, its answer, the write), so what bounds another
client's wait is how much work the other tasks do in one pass. A block's work
is mostly crypto, which the command alone does not tell: a block of 130 DELs
is 130 signature checks, a block of 80 NEWs is 80 checks and 80 keys made.
So every transmission is given a cost (`transmission_cost`), from what its
verification and its handler do, in units of about a tenth of an Ed25519
check (timed one by one on a busy 2-CPU machine: an Ed25519 check 199 us, an
X25519 authenticator 137 us, a key pair and its DH secret 160 us; `BASE` is
an estimate of the Python work around them):

- `BASE`, every transmission: parsing, the queue lookup, the handler, the
  answer (dispatch.py, commands.py);
- `ED25519`: a 64-byte authorization's signature check (114 bytes: one check
  of a dummy key), `verify_authorization`, plus a unit for every `HASHED`
  bytes the check hashes (a check of a 16 KB SEND takes 1.8x one of an ACK);
- `X25519_AUTHENTICATOR`: an 80-byte authenticator, one DH, a SHA-512 and a
  box opened, `verify_authorization`;
- `KEYS`: a key pair and its DH secret, NKEY once and NEW twice (its queue and,
  from v17, its notifier), `Commands._new`, `_add_notifier`;
- `MESSAGE`: SUB, ACK, GET, a message body boxed for the answer
  (`Deliverer.message_transmission`).

A transmission that fails before its check (bad length, no authorization)
costs no more than `BASE`; one whose queue or key is missing still pays for
the check, which runs against a dummy key (docs/protocol.md#behaviour).

A block costing at most `FREE_COST` (two signed commands: a client's everyday
SEND or ACK; a dozen PINGs) is answered at once. A costlier block whose cost is
mostly ACKs of the messages the router pushed to this connection and is
waiting to have acknowledged (`acknowledging_cost`), or light transmissions
(PINGs, unsigned commands: `BASE` each), needs no place: it works in
slices of `FREE_COST`, yielding between them, as so many everyday blocks
would. Those ACKs are the answers to the router's own pushes, at most one per
queue the connection holds, each for a message a sender's SEND paid for; were
they to wait for places, a recipient batching its ACKs would queue behind
every costly block while the senders' single SENDs never wait, and the router
would take messages in faster than it hands them out.

Any other costlier block takes turns: it
waits for one of `AT_ONCE` places, router-wide, works until it has spent
`TURN_BUDGET`, then gives its place to the next block waiting (or, with
nobody waiting, just yields) and waits for a place again, in arrival order
(`trio.CapacityLimiter` hands a released place to the oldest waiter). So a
pass of the scheduler does at most `AT_ONCE` turns of costly work, however
many clients flood, and a block's answers keep their order (dispatch.py).

This replaces the former rule that only blocks of more than eight SUBs took
turns, four at a time: such a block is now one costly block among others.
What that rule also did stays, for the same reason: a block waits for its
first place holding only its bytes, and is taken apart again when its turn
comes, since a crowd of 20,000 blocks parked parsed would be half a gigabyte.
Those bytes are the block's content without its padding (dispatch.py): a few
hundred bytes per command rather than the 16 KB block, which for a wave of
reconnecting clients was most of the router's peak.

Blocks in progress are bounded too: at most `IN_PROGRESS` costly blocks,
router-wide, are between their first turn and their last; the others wait for
their first in arrival order, as bytes. A block in progress holds everything
it has parsed, verified and answered so far (about 50 KB for 100 SUBs), so
were each waiting block to get its first turn before any finished, a storm
of 1,000 such blocks would hold 50 MB of these at once, and every `Sub` the
storm makes would be allocated among them: CPython's small-object allocator
returns an arena to the system only once every object in it is freed, so
those few long-lived objects kept the storm's arenas, ~550 B of RSS per
subscription for a 48-byte `Sub` (bench/RESULTS.md, "The memory a reconnect
storm leaves"). Within the bound the blocks still take turns as above. A
block that waits for its client to read its answers gives its place in
progress up (`step_aside`, dispatch.py), so clients that do not read hold up
no other block.

What a block pays before any of this, in the task that received it (its read,
its pace), is bounded per pass too: the read takes a place among the arrivals
(edge/arrivals.py), a few per pass of the scheduler, so that a crowd of blocks
readable at once is not one long pass of reads.

A place is held across the store's awaits of the block's commands (a durable
store's group commit): a turn is bounded in units of work, not in time, so
on the journal and SQLite stores a costly block may hold its place while it
waits for a commit, and costly blocks then take more time to be answered in
all; blocks of `FREE_COST` or less never wait for a place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from enum import Enum

import trio

from router.protocol.transmission import entity_and_command_offset
from router.protocol.types import ProtocolError

BASE = 2  # half paid with the verification, half with the handler
ED25519 = 10
X25519_AUTHENTICATOR = 7
KEYS = 9
MESSAGE = 2
HASHED = 2048  # bytes an authorization's check hashes per unit (0.5 unit per KB)

FREE_COST = 30  # a block of at most this is answered without a turn
TURN_BUDGET = 40  # units a block spends in one turn (then yields)
AT_ONCE = 2  # costly blocks worked on at a time, router-wide
IN_PROGRESS = 16  # costly blocks between their first turn and their last, router-wide

_AUTHORIZATION_COST = {64: ED25519, 114: ED25519, 80: X25519_AUTHENTICATOR}
# By the command's tag (docs/protocol.md#command-table), which is its type's name.
# RFWD opens two boxes keyed by X25519 (the proxy's, the client's) and verifies the
# transmission inside, whose signature its own bytes do not show.
_COMMAND_COST = {"NEW": 2 * KEYS, "NKEY": KEYS, "SUB": MESSAGE, "ACK": MESSAGE,
                 "GET": MESSAGE, "RFWD": 2 * X25519_AUTHENTICATOR + ED25519 + MESSAGE}


def verification_cost(raw: bytes) -> int:
    """Parsing a transmission, looking its queue up and checking its authorization."""
    check = _AUTHORIZATION_COST.get(raw[0] if raw else 0, 0)
    return BASE // 2 + (check + len(raw) // HASHED if check else 0)


def execution_cost(command_name: str) -> int:
    """Running a verified command's handler and encoding its answer."""
    return BASE - BASE // 2 + _COMMAND_COST.get(command_name, 0)


def transmission_cost(raw: bytes, version: int) -> int:
    """Both, read from the transmission's bytes without parsing it (one that does not
    parse costs its verification only: it gets its error)."""
    cost = verification_cost(raw)
    try:
        _, start = entity_and_command_offset(raw, version)
    except ProtocolError:
        return cost
    tag = raw[start : start + 4].split(b" ", 1)[0]
    return cost + execution_cost(tag.decode("ascii", "replace"))


def block_cost(raw_transmissions: list[bytes], version: int) -> int:
    return sum(transmission_cost(raw, version) for raw in raw_transmissions)


AwaitsAck = Callable[[bytes, bytes], bool]  # (recipient id, msg id): the message in flight


def _acknowledges(raw: bytes, version: int, awaits_ack: AwaitsAck) -> bool:
    """Whether the transmission is an ACK of a message in flight to this connection."""
    try:
        entity_id, start = entity_and_command_offset(raw, version)
    except ProtocolError:
        return False
    # "ACK " and the message id as a short string, the transmission's last bytes; a
    # shorter or longer one is no ACK of a message in flight (it gets its CMD error).
    return (raw.startswith(b"ACK ", start) and len(raw) > start + 4
            and raw[start + 4] == len(raw) - start - 5
            and awaits_ack(entity_id, raw[start + 5 :]))


def acknowledging_cost(raw_transmissions: list[bytes], version: int,
                       awaits_ack: AwaitsAck) -> int:
    """The part of `block_cost` that is ACKs of messages in flight to this connection
    (`awaits_ack`): the answers to the router's own pushes."""
    return sum(verification_cost(raw) + execution_cost("ACK") for raw in raw_transmissions
               if _acknowledges(raw, version, awaits_ack))


class Pace(Enum):
    """How a block is worked on: at once, in `Slices`, or in turns (`Turn`)."""

    FREE = "free"
    SLICES = "slices"
    TURNS = "turns"


def pace_of(raw_transmissions: Iterable[bytes], version: int, awaits_ack: AwaitsAck) -> Pace:
    """`Pace.FREE` for a block of `block_cost` at most `FREE_COST`; else `Pace.SLICES` if
    its cost less its `acknowledging_cost` and less its light transmissions' (those
    costing no more than `BASE`: no check, no keys, no message boxed, as a PING) is
    at most `FREE_COST`; else `Pace.TURNS`. A block of light transmissions is a run
    of everyday work: a client whose PINGs piled up while it waited (its client
    packs them into one block) must not then wait for a place behind a reconnect
    storm's SUB blocks, which kept another client's PINGs waiting for most of a
    storm (bench/RESULTS.md, "Reconnect storm").

    Read in order and left as soon as the cost not of ACKs passes `FREE_COST` (it
    only grows): a block of 100 SUBs is known to need turns after its third. This
    is what every costly block pays before it waits for its turn, in the task that
    received it: when a storm's blocks arrive together, one pass of the scheduler
    runs all those tasks, and the PING of another client waits for that pass. Costed
    in full, 100 SUBs took ~0.3 ms, so that 1,000 blocks arriving at once made one
    pass of ~300 ms (bench/RESULTS.md, "Reconnect storm")."""
    cost = needs_no_place = 0
    for raw in raw_transmissions:
        one = transmission_cost(raw, version)
        cost += one
        if one <= BASE or _acknowledges(raw, version, awaits_ack):
            needs_no_place += one
        if cost - needs_no_place > FREE_COST:
            return Pace.TURNS
    return Pace.FREE if cost <= FREE_COST else Pace.SLICES



class Turns:
    """The router's places for costly blocks (one for the router, shared by every
    connection's dispatcher)."""

    __slots__ = ("_places", "_in_progress", "budget")

    def __init__(self, at_once: int = AT_ONCE, budget: int = TURN_BUDGET,
                 in_progress: int = IN_PROGRESS) -> None:
        self._places = trio.CapacityLimiter(at_once)
        self._in_progress = trio.Semaphore(in_progress)  # FIFO: arrival order
        self.budget = budget

    def turn(self) -> Turn:
        return Turn(self._places, self.budget, self._in_progress)

    def statistics(self) -> trio.CapacityLimiterStatistics:
        return self._places.statistics()


class Pacing(ABC):
    """A costly block's work paid for piece by piece: `spend` is called before each
    piece with its cost, and once `due` the block pauses (`end`, then `begin`)."""

    __slots__ = ("_budget", "_left", "turns_taken")

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._left = 0
        self.turns_taken = 0

    @abstractmethod
    async def begin(self) -> None:
        """Start the next piece of work: a turn waits for a place, a slice yields."""

    def end(self) -> None:  # noqa: B027 - only a turn has a place to give back
        """Give back what `begin` took, if anything."""

    def step_aside(self) -> None:
        """`end`, and give up the place in progress too, for a wait that does not
        depend on the router (a client that reads its answers slowly): the next
        `begin` queues for one again, behind the blocks that came meanwhile."""
        self.end()

    def finish(self) -> None:
        """The block is done: give back everything."""
        self.step_aside()

    @property
    def due(self) -> bool:
        """This turn's budget is spent: the block should let the others go first."""
        return self._left <= 0

    def charge(self, cost: int) -> None:
        """Account for work about to be done (a turn may overrun by one piece)."""
        self._left -= cost

    async def spend(self, cost: int) -> None:
        """`charge`, after pausing if the turn is `due`."""
        if self.due:
            await self.pause()
        self.charge(cost)

    async def pause(self) -> None:
        self.end()
        await self.begin()


class Turn(Pacing):
    """One costly block's turns: the first `begin` waits for a place in progress,
    then each `begin` waits for a place, `end` gives it back (to the oldest block
    waiting; with none waiting, acquiring a free place still yields to the
    scheduler's other tasks). Between `end` and `begin` the block holds no place,
    whatever it waits for; it keeps its place in progress until `finish` (or
    `step_aside`)."""

    __slots__ = ("_places", "_holding", "_in_progress", "_admitted")

    def __init__(self, places: trio.CapacityLimiter, budget: int,
                 in_progress: trio.Semaphore | None = None) -> None:
        super().__init__(budget)
        self._places = places
        self._holding = False
        self._in_progress = in_progress
        self._admitted = False

    async def begin(self) -> None:
        if not self._admitted and self._in_progress is not None:
            await self._in_progress.acquire()
            self._admitted = True
        await self._places.acquire()
        self._holding = True
        self._left = self._budget
        self.turns_taken += 1

    def end(self) -> None:
        if self._holding:
            self._holding = False
            self._places.release()

    def step_aside(self) -> None:
        self.end()
        if self._admitted:
            self._admitted = False
            self._in_progress.release()  # type: ignore[union-attr]


class Slices(Pacing):
    """A block that needs no place (its cost is mostly ACKs of messages in flight):
    it starts at once and yields after every `FREE_COST` of work, as a run of
    everyday blocks would."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(FREE_COST)
        self._left = FREE_COST  # the first slice without a yield

    async def begin(self) -> None:
        await trio.lowlevel.checkpoint()
        self._left = self._budget
        self.turns_taken += 1
