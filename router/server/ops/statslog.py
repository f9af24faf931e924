"""The router's statistics log: one CSV line per interval plus a daily roll-up.

This module is the file and the task that writes it; the lines are made in
`stats_lines.py`, the active queues counted in `active_queues.py`.

Theory of operation
-------------------
The router keeps one set of monotonic totals (`core/counters.py` `Counters`) and answers
`Router.statistics()` with a snapshot of them (`RouterStatistics`). The log
holds two snapshots: the one taken when the current interval began and the one
taken when the current UTC day began. A line is the difference between such a
snapshot and the snapshot at the line's end, computed by the pure `stats_line`;
the gauges (subscriptions, clients) are read from the later snapshot. So the
router increments nothing for the log, and no count is lost or counted twice.
The router also calls `record_active_queue` with the recipient id of every queue
that sees activity; the log never awaits anything of the router.

`StatsLog.run` sleeps until the next interval boundary (aligned to UTC, default
hourly), then in one synchronous step takes a snapshot and formats the lines; the
file append and the state save run on a worker thread. When the UTC day changes,
a `P1D` roll-up line follows the last interval line of the day. Lines carry the
start of the period they cover.

Active queues per day, ISO week and month are counted in three HyperLogLog
sketches (4096 one-byte registers each) over a 64-bit hash of the recipient id:
bounded memory, no per-queue history and no raw ids, about 1.6% standard error.
The week sketch is cleared when a Monday starts, the month sketch on the 1st.

The counts of the interval and of the day so far, and the sketches, are saved to a
small JSON state file next to the log after every line and on a clean stop. At
start the router's totals are zero again, so the saved counts become the start
snapshots (the current totals minus what was already counted) and a restart
within an interval keeps counting it. An interval that ended while the router was
stopped is written at start, with the time it began. A crash between appending a
line and saving the state can repeat that line at the next start; readers keep
one line per (period, time), see docs/stats-log.md.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from store.durability import atomic_write

from ..core.counters import RouterStatistics
from .active_queues import ActiveQueues
from .stats_lines import (
    DAY,
    DEFAULT_INTERVAL,
    HEADER,
    check_interval,
    floor_to,
    interval_counts,
    period_resets,
    rebase,
    stats_line,
)

log = logging.getLogger(__name__)


STATE_VERSION = 1
WAKE_SLACK = 1.0  # seconds
REFRESH_TIMEOUT = 10.0  # seconds a line waits for its figures; then written with the last ones
STOP_REFRESH_TIMEOUT = 5.0  # seconds a stop waits for the figures it saves


@dataclass(frozen=True, slots=True)
class StatsLogStatistics:
    lines_written: int  # lines that reached the file since the router started



# --- the log -------------------------------------------------------------------


class StatsLog:
    """Appends the stats lines of one router to `path` (CSV with a header row).

    `statistics` returns the router's current snapshot (`Router.statistics`). Run
    the log as a task (`await nursery.start(stats.run)`): it restores the saved
    state first and saves it when cancelled. Tools that drive the log without a
    Trio loop call `restore(now)`, `write_due(now)` and `save()` themselves.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        statistics: Callable[[], RouterStatistics],
        *,
        interval: int = DEFAULT_INTERVAL,
        state_path: str | os.PathLike[str] | None = None,
        wall_clock: Callable[[], float] | None = None,
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.path = Path(path)
        self.state_path = (
            Path(state_path) if state_path else self.path.with_name(self.path.name + ".state")
        )
        self._statistics = statistics
        # Awaited before each line when `statistics` is put together from elsewhere
        # (the workers of a supervisor: workers/stats.py), bounded by REFRESH_TIMEOUT.
        self._refresh = refresh
        self.active = ActiveQueues()
        self.interval = check_interval(interval)
        self._wall = wall_clock or time.time
        self._interval_start: int | None = None
        self._interval_seconds = self.interval
        self._day_start = 0
        self._interval_base = self._day_base = statistics()
        self._lines_written = 0
        self._written = trio.Event()

    def record_active_queue(self, recipient_id: bytes) -> None:
        self.active.record(recipient_id)

    # -- state ------------------------------------------------------------------

    def restore(self, now: float | None = None) -> list[str]:
        """Take the saved state back, open the current interval and write the lines
        of periods that ended while the router was stopped (returned too).
        Call once, before the router counts anything."""
        lines = self._restored_lines(self._wall() if now is None else now)
        self._write(lines, self._state_bytes())
        self._lines_written += len(lines)
        return lines

    def _restored_lines(self, now: float) -> list[str]:
        lines = self._load_state(now)
        if self._interval_start is None:
            self._start_periods(now)
        return lines

    def _load_state(self, now: float) -> list[str]:
        state = self._read_state()
        if state is None:
            return []
        self._interval_base = rebase(self._statistics(), state["counts"])
        self._day_base = rebase(self._interval_base, state["day_counts"])
        self.active.merge_state(state["hll"])
        self._interval_start = int(state["interval_start"])
        self._interval_seconds = int(state["interval"])
        self._day_start = int(state["day_start"])
        return self.roll(now)

    def _read_state(self) -> dict | None:
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("stats state %s unreadable, starting from zero: %s", self.state_path, exc)
            return None
        if state.get("version") != STATE_VERSION:
            log.warning("stats state %s has an unknown version, ignored", self.state_path)
            return None
        return state

    def state(self) -> dict:
        """What `save` writes: the counts of the interval and of the day's earlier
        intervals (column names), enough to continue both after a restart."""
        return {
            "version": STATE_VERSION,
            "interval": self._interval_seconds,
            "interval_start": self._interval_start,
            "day_start": self._day_start,
            "counts": interval_counts(self._interval_base, self._statistics()),
            "day_counts": interval_counts(self._day_base, self._interval_base),
            "hll": self.active.to_state(),
        }

    def _state_bytes(self) -> bytes:
        return json.dumps(self.state()).encode()

    def save(self) -> None:
        """Write the state file atomically (temporary file, fsync, rename)."""
        if self._interval_start is not None:
            _write_atomic(self.state_path, self._state_bytes())

    # -- rolling periods ----------------------------------------------------------

    def _start_periods(self, now: float) -> None:
        self._interval_start = floor_to(now, self.interval)
        self._interval_seconds = self.interval
        self._day_start = floor_to(now, DAY)

    def next_boundary(self) -> int:
        """Wall-clock time at which the current interval ends."""
        assert self._interval_start is not None, "restore() first"
        return self._interval_start + self._interval_seconds

    def roll(self, now: float) -> list[str]:
        """Close the current interval if it has ended by `now`; returns the lines.

        Synchronous and free of I/O: one snapshot ends the interval and starts the
        next. Periods that were skipped entirely (the router was stopped) get no line.
        """
        if self._interval_start is None or now < self.next_boundary():
            return []
        snapshot = self._statistics()
        active = self.active.estimates()
        lines = []
        if self._interval_seconds != DAY:
            lines.append(stats_line(
                self._interval_start, self._interval_seconds, self._interval_base, snapshot, active
            ))
        if now >= self._day_start + DAY:
            lines.append(stats_line(self._day_start, DAY, self._day_base, snapshot, active))
            self._new_day(floor_to(now, DAY), snapshot)
        self._interval_start = floor_to(now, self.interval)
        self._interval_seconds = self.interval
        self._interval_base = snapshot
        return lines

    def write_due(self, now: float | None = None) -> list[str]:
        """Roll and write at once, blocking (for tools and tests that drive the log
        without a Trio loop); returns the lines written."""
        lines = self.roll(self._wall() if now is None else now)
        if lines:
            self._write(lines, self._state_bytes())
            self._lines_written += len(lines)
        return lines

    def _new_day(self, day_start: int, snapshot: RouterStatistics) -> None:
        self.active.new_day(*period_resets(self._day_start, day_start))
        self._day_start = day_start
        self._day_base = snapshot

    # -- file ---------------------------------------------------------------------

    def _write(self, lines: list[str], state: bytes) -> None:
        """Append lines (header first if the file is new), then save `state`.

        Runs on a worker thread: it touches only the files and its arguments.
        """
        if self.path.exists() and self.path.stat().st_size:
            self._check_header()
        new_file = not self.path.exists() or self.path.stat().st_size == 0
        if lines or new_file:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="ascii") as f:
                if new_file:
                    f.write(HEADER + "\n")
                f.writelines(lines)
                f.flush()
                os.fsync(f.fileno())
        _write_atomic(self.state_path, state)

    def _check_header(self) -> None:
        with open(self.path, encoding="ascii", errors="replace") as f:
            first = f.readline().rstrip("\n")
        if first != HEADER:
            aside = self.path.with_name(self.path.name + ".old")
            log.warning("stats log %s has other columns; moved to %s", self.path, aside)
            os.replace(self.path, aside)

    # -- the task -----------------------------------------------------------------

    def statistics(self) -> StatsLogStatistics:
        return StatsLogStatistics(lines_written=self._lines_written)

    async def wait_lines_written(self, count: int) -> None:
        """Wait until `count` lines in total have reached the file (for tests and tools)."""
        while self._lines_written < count:
            await self._written.wait()

    async def _write_in_thread(self, lines: list[str]) -> None:
        # The snapshot and the state are taken here, on the router's thread; only
        # the file work moves to the worker. A full disk costs the log these lines,
        # never the router its start or its run.
        try:
            await trio.to_thread.run_sync(self._write, lines, self._state_bytes())
        except OSError as e:
            log.warning("stats log: cannot write %s: %s; %d line(s) lost", self.path,
                        e.strerror or e, len(lines))
        self._lines_written += len(lines)
        self._written.set()
        self._written = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write a line at every interval boundary until cancelled; then save the state."""
        if self._interval_start is None:
            await self._write_in_thread(self._restored_lines(self._wall()))
        task_status.started()
        try:
            while True:
                await self._write_next_boundary()
        finally:
            # A clean stop: keep the partial interval for the next start, with the
            # figures of the last moment when they come from elsewhere.
            if self._refresh is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(STOP_REFRESH_TIMEOUT):
                    await self._refresh()
            try:
                self.save()
            except OSError as e:
                log.warning("stats log: cannot save its state in %s: %s", self.state_path,
                            e.strerror or e)

    async def _write_next_boundary(self) -> None:
        boundary = self.next_boundary()
        await trio.sleep(max(0.0, boundary - self._wall()))
        now = self._wall()
        if now < boundary - WAKE_SLACK:
            return  # the wall clock was set back while we slept
        # monotonic and wall clocks drift apart a little: a wake-up just before the
        # boundary belongs to it
        if self._refresh is not None:
            with trio.move_on_after(REFRESH_TIMEOUT):
                await self._refresh()
        lines = self.roll(max(now, boundary))
        if lines:
            log.debug("stats: %d line(s) to %s", len(lines), self.path)
            await self._write_in_thread(lines)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, [data])
