"""Active queues per day, ISO week and month, counted in HyperLogLog sketches over
a hash of the recipient id: bounded memory, no per-queue history, no raw ids.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping

HLL_BITS = 12
HLL_SIZE = 1 << HLL_BITS
_HLL_ALPHA = 0.7213 / (1 + 1.079 / HLL_SIZE)


def queue_hash(recipient_id: bytes) -> int:
    """A 64-bit hash of a recipient id; only this ever reaches a sketch."""
    return int.from_bytes(hashlib.blake2b(recipient_id, digest_size=8).digest(), "big")


class HyperLogLog:
    """A distinct-count sketch of fixed size (Flajolet et al., 2007)."""

    __slots__ = ("registers",)

    def __init__(self, registers: bytes | None = None) -> None:
        if registers is not None and len(registers) != HLL_SIZE:
            raise ValueError(f"a sketch has {HLL_SIZE} registers, not {len(registers)}")
        self.registers = bytearray(registers if registers is not None else HLL_SIZE)

    def add_hash(self, h: int) -> None:
        index = h >> (64 - HLL_BITS)
        rest = h & ((1 << (64 - HLL_BITS)) - 1)
        # rank = position of the first 1 bit in the remaining 52 bits, counted from 1
        rank = (64 - HLL_BITS) - rest.bit_length() + 1
        if rank > self.registers[index]:
            self.registers[index] = rank

    def estimate(self) -> int:
        zeros = self.registers.count(0)
        if zeros == HLL_SIZE:
            return 0
        raw = _HLL_ALPHA * HLL_SIZE * HLL_SIZE / sum(2.0**-r for r in self.registers)
        if raw <= 2.5 * HLL_SIZE and zeros:
            # small range: linear counting is nearly exact here
            return round(HLL_SIZE * math.log(HLL_SIZE / zeros))
        return round(raw)

    def merge(self, other: HyperLogLog) -> None:
        self.registers = bytearray(map(max, self.registers, other.registers))

    def clear(self) -> None:
        self.registers = bytearray(HLL_SIZE)

    def to_text(self) -> str:
        return base64.b64encode(bytes(self.registers)).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> HyperLogLog:
        return cls(base64.b64decode(text))


# --- the active-queue sketches ---------------------------------------------------

SKETCH_PERIODS = ("day", "week", "month")


class ActiveQueues:
    """The distinct queues active in the current UTC day, ISO week and month."""

    __slots__ = ("day", "week", "month")

    def __init__(self) -> None:
        self.day = HyperLogLog()
        self.week = HyperLogLog()
        self.month = HyperLogLog()

    def record(self, recipient_id: bytes) -> None:
        """Count the queue as active today, this week and this month."""
        h = queue_hash(recipient_id)
        self.day.add_hash(h)
        self.week.add_hash(h)
        self.month.add_hash(h)

    def estimates(self) -> dict[str, int]:
        return {f"active_queues_{name}": getattr(self, name).estimate() for name in SKETCH_PERIODS}

    def new_day(self, week_changed: bool, month_changed: bool) -> None:
        self.day.clear()
        if week_changed:
            self.week.clear()
        if month_changed:
            self.month.clear()

    def to_state(self) -> dict[str, str]:
        return {name: getattr(self, name).to_text() for name in SKETCH_PERIODS}

    def merge_sketch(self, sketch: HyperLogLog) -> None:
        """Count the queues of `sketch` as active today, this week and this month (a
        worker's queues, for its supervisor's log: workers/stats.py)."""
        for name in SKETCH_PERIODS:
            getattr(self, name).merge(sketch)

    def merge_state(self, state: Mapping[str, str]) -> None:
        for name in SKETCH_PERIODS:
            getattr(self, name).merge(HyperLogLog.from_text(state[name]))
