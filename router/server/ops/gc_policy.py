"""Keeping the cyclic garbage collector's pauses short while clients come and go.

Why. A full collection walks every gc-tracked object that is not frozen: with a
million subscriptions made since the start that is the better part of a second
during which no client is served (bench/RESULTS.md, "Scale"). `smp-router serve`
freezes what it loaded at start (`cli.freeze_loaded_state`), but every
subscription, connection and stored message made afterwards is walked again by
every full collection, and CPython runs one whenever the objects that survived
into the oldest generation grew by a quarter: during a wave of reconnections,
repeatedly, each pass longer than the last.

Theory of operation. While the policy runs, CPython never collects the oldest
generation by itself (its threshold is set out of reach): only the young
generations are collected automatically, and those passes are short whatever
the size of the rest. What survives into the oldest generation is frozen
instead, by one task that looks at it ten times a second (`gc.get_objects(2)`,
cheap because it is kept small). Why CPython's own full collections are off
rather than merely kept small: when every connection has a block of SUBs to
verify, one pass of the trio scheduler takes seconds, so a task cannot look
often enough; whatever arrives meanwhile then waits, unwalked, to be frozen.

- budget: once it holds `budget` objects, the young generations are collected
  and everything is frozen;
- young budget: the young generations are not bounded by CPython's thresholds
  (its count nets out every deallocation, old objects' included, so a wave of
  SUBs fills them with tens of thousands of subscriptions between two
  collections). When a young collection is about to start with more than
  `young_budget` objects to walk, a `gc.callbacks` hook freezes them instead,
  and the pass walks nothing. Young cyclic garbage frozen so waits for the
  quiet-time collection;
- settle: once it has stopped growing for `settle` seconds after at least
  `settle_floor` objects reached it (a wave of reconnections is over), the same
  freeze runs, so that at a steady state the passes walk almost nothing; and
  the C heap's free pages go back to the system (glibc's `malloc_trim`);
- trim settle: a burst of blocks (a wave of SUBs, the hand-offs of several
  workers more so: docs/workers.md#costs) leaves megabytes of freed 16 KB
  buffers between the live objects made meanwhile, which glibc keeps as RSS
  (free chunks amid the heap are not returned by `free`), and frees them only
  once the burst is over. So once the process has used `trim_floor` CPU
  seconds since the last trim and then (almost) none for `trim_settle` seconds
  (the burst is over), the heap is trimmed at once rather than with the
  settled wave, seconds later: a pass of ~5-20 ms per burst, none while the
  router stays busy;
- quiet-time collection: objects frozen while alive that later die inside a
  reference cycle are never collected while frozen (garbage already in the
  oldest generation when it is frozen waits too). The router's own objects
  leave no such cycle when a connection ends (edge/websocket.py `framing`; a
  reconnection storm of 20,000 clients left 230,000 objects before, none now),
  so this is a safety net for cycles made elsewhere. At most every
  `full_interval` seconds and only after `quiet` seconds without a new
  connection, everything is unfrozen, collected and frozen again: the one long
  pause, taken when nobody is connecting. `full_interval=None` turns it off.

`GcPauses` records every collection's duration through `gc.callbacks`, which is
how the pauses this policy keeps short are measured.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

log = logging.getLogger(__name__)

NEVER = 2**31 - 1  # a threshold the count of young collections never reaches
_IDLE = 0.2  # a share of a core below which the process is not busy with a burst


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _libc_malloc_trim()


class GcPauses:
    """The duration of every collection by generation, via `gc.callbacks`."""

    def __init__(self) -> None:
        self._started = 0.0
        self.count = [0, 0, 0]
        self.longest_ms = [0.0, 0.0, 0.0]
        self.total_ms = [0.0, 0.0, 0.0]
        gc.callbacks.append(self._callback)

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def reset(self) -> None:
        self.count = [0, 0, 0]
        self.longest_ms = [0.0, 0.0, 0.0]
        self.total_ms = [0.0, 0.0, 0.0]

    @property
    def longest(self) -> float:
        """The longest pause of any generation, in milliseconds."""
        return max(self.longest_ms)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started) * 1000
        generation = info["generation"]
        self.count[generation] += 1
        self.total_ms[generation] += ms
        self.longest_ms[generation] = max(self.longest_ms[generation], ms)


@dataclass
class GcPolicy:
    """The settings of the policy and what it has done (see the module comment)."""

    budget: int = 10_000  # unfrozen old objects that trigger a collect-and-freeze
    young_budget: int = 20_000  # young objects above which a collection freezes them
    settle: float = 10.0  # seconds without growth that end a wave
    settle_floor: int = 2_000  # growth smaller than this is not a wave
    trim_settle: float = 0.5  # seconds of (almost) no CPU that end a burst
    trim_floor: float = 1.0  # CPU seconds since the last trim that make a burst
    check_interval: float = 0.1  # seconds between two looks at the oldest generation
    full_interval: float | None = 6 * 3600.0  # seconds between quiet-time full collections
    quiet: float = 60.0  # seconds without a new connection that make a quiet time
    freezes: int = 0
    young_freezes: int = 0
    full_collections: int = 0
    longest_freeze_ms: float = 0.0  # our own collect-and-freeze passes
    trims: int = 0
    longest_trim_ms: float = 0.0
    last_full_ms: float | None = None
    _since_full: float = field(default=0.0, repr=False)

    async def run(self, connections_opened: Callable[[], int]) -> None:
        """Watch the collector until cancelled; `connections_opened` counts connections
        since the start (what tells a quiet time)."""
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], NEVER)
        gc.callbacks.append(self._before_collection)
        try:
            await self._watch(connections_opened)
        finally:
            gc.callbacks.remove(self._before_collection)
            gc.set_threshold(*thresholds)

    def _before_collection(self, phase: str, info: dict[str, int]) -> None:
        """A young collection with too much to walk freezes it instead."""
        generation = info["generation"]
        if phase != "start" or generation == 2:
            return
        young = sum(len(gc.get_objects(generation=g)) for g in range(generation + 1))
        if young > self.young_budget:
            gc.freeze()  # the lists the pass is about to walk are empty now
            self.young_freezes += 1

    async def _watch(self, connections_opened: Callable[[], int]) -> None:
        last_size = 0
        wave = 0  # objects that reached the oldest generation since the last settle
        last_growth = trio.current_time()
        last_connections, last_connection_at = connections_opened(), trio.current_time()
        self._since_full = trio.current_time()
        busy, last_cpu = 0.0, time.process_time()  # CPU seconds since the last trim
        last_busy = last_look = trio.current_time()
        while True:
            await trio.sleep(self.check_interval)
            now = trio.current_time()
            cpu = time.process_time()
            if cpu - last_cpu > _IDLE * (now - last_look):
                last_busy = now
            busy += cpu - last_cpu
            last_cpu, last_look = cpu, now
            if busy >= self.trim_floor and now - last_busy >= self.trim_settle:
                self.trim_heap()
                busy = 0.0
            size = len(gc.get_objects(generation=2))
            if size > last_size:
                last_growth = now
                wave += size - last_size
            opened = connections_opened()
            if opened != last_connections:
                last_connections, last_connection_at = opened, now
            settled = wave >= self.settle_floor and now - last_growth >= self.settle
            if size >= self.budget or settled:
                self.collect_and_freeze()
                if settled:
                    self.trim_heap()
                    wave, busy = 0, 0.0
                size = 0
            elif self._full_due(now) and now - last_connection_at >= self.quiet:
                self.full_collection()
                self._since_full = now
            last_size = size

    def collect_and_freeze(self) -> None:
        """Collect the young generations (a short pass) and freeze everything."""
        started = time.perf_counter()
        gc.collect(1)
        gc.freeze()
        ms = (time.perf_counter() - started) * 1000
        self.freezes += 1
        self.longest_freeze_ms = max(self.longest_freeze_ms, ms)

    def trim_heap(self) -> None:
        """Give the C heap's free pages back to the system, where glibc can."""
        if _malloc_trim is None:
            return
        started = time.perf_counter()
        _malloc_trim(0)
        self.trims += 1
        self.longest_trim_ms = max(self.longest_trim_ms, (time.perf_counter() - started) * 1000)

    def full_collection(self) -> None:
        """Unfreeze, collect everything, freeze again: the one long pause."""
        started = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        self.last_full_ms = (time.perf_counter() - started) * 1000
        self.full_collections += 1
        log.info("quiet-time full collection: %d objects freed in %.0f ms",
                 collected, self.last_full_ms)

    def _full_due(self, now: float) -> bool:
        interval = self.full_interval
        return interval is not None and math.isfinite(interval) and (
            now - self._since_full >= interval
        )

    def report(self) -> dict[str, object]:
        return {
            "freezes": self.freezes,
            "young_freezes": self.young_freezes,
            "full_collections": self.full_collections,
            "longest_freeze_ms": self.longest_freeze_ms,
            "trims": self.trims,
            "longest_trim_ms": self.longest_trim_ms,
            "last_full_ms": self.last_full_ms,
            "frozen": gc.get_freeze_count(),
        }
