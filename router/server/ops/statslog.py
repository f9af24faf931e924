"""The router's statistics log: one CSV line per interval plus a daily roll-up.

Theory of operation
-------------------
The router keeps one set of monotonic totals (`stats.Counters`) and answers
`Router.statistics()` with a snapshot of them (`stats.RouterStatistics`). The log
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

import base64
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import trio

from store.durability import atomic_write

from ..core.counters import RouterStatistics

log = logging.getLogger(__name__)

DAY = 86400
DEFAULT_INTERVAL = 3600
STATE_VERSION = 1
WAKE_SLACK = 1.0  # seconds

# Count columns: how many times each thing happened in the period. Each column
# writes one field of the router's statistics; the column names are the file's.
COUNTER_COLUMNS = {
    "queues_created": "queues_created",
    "queues_secured": "queues_secured",
    "queues_deleted": "queues_deleted",
    "msgs_sent": "messages_sent",
    "msgs_delivered": "messages_delivered",
    "msgs_acknowledged": "messages_acked",
    "msgs_expired": "messages_expired",
    "msgs_quota_refused": "messages_quota_refused",
}
# Gauge columns: the statistic's value at the end of the period.
GAUGE_COLUMNS = {"subscriptions": "subscriptions", "clients": "connections"}
COUNTER_FIELDS = tuple(COUNTER_COLUMNS)
GAUGE_FIELDS = tuple(GAUGE_COLUMNS)
ACTIVE_FIELDS = ("active_queues_day", "active_queues_week", "active_queues_month")
COLUMNS = ("time", "period", *COUNTER_FIELDS, *GAUGE_FIELDS, *ACTIVE_FIELDS)
HEADER = ",".join(COLUMNS)

# --- HyperLogLog -------------------------------------------------------------

HLL_BITS = 12
HLL_SIZE = 1 << HLL_BITS
_HLL_ALPHA = 0.7213 / (1 + 1.079 / HLL_SIZE)


@dataclass(frozen=True, slots=True)
class StatsLogStatistics:
    lines_written: int  # lines that reached the file since the router started


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

    def merge_state(self, state: Mapping[str, str]) -> None:
        for name in SKETCH_PERIODS:
            getattr(self, name).merge(HyperLogLog.from_text(state[name]))


# --- pure helpers: periods and line formatting --------------------------------


def period_label(seconds: int) -> str:
    """ISO 8601 duration of a period: 3600 -> PT1H, 900 -> PT15M, 86400 -> P1D."""
    if seconds == DAY:
        return "P1D"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}H" if hours else "",
        f"{minutes}M" if minutes else "",
        f"{secs}S" if secs else "",
    ]
    return "PT" + "".join(parts)


def check_interval(seconds: int) -> int:
    """Intervals must tile a UTC day so that every line falls in exactly one day."""
    if seconds < 1 or DAY % seconds:
        raise ValueError(f"stats interval must divide 86400 seconds, got {seconds}")
    return seconds


def floor_to(ts: float, step: int) -> int:
    return int(ts // step) * step


def format_time(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_line(
    start: int,
    seconds: int,
    counts: Mapping[str, int],
    gauges: Mapping[str, int],
    active: Mapping[str, int],
) -> str:
    """One CSV line (with its newline) in the order of `COLUMNS`."""
    values = [format_time(start), period_label(seconds)]
    values += [str(int(counts.get(name, 0))) for name in COUNTER_FIELDS]
    values += [str(int(gauges.get(name, 0))) for name in GAUGE_FIELDS]
    values += [str(int(active.get(name, 0))) for name in ACTIVE_FIELDS]
    return ",".join(values) + "\n"


def interval_counts(before: RouterStatistics, after: RouterStatistics) -> dict[str, int]:
    """The count columns of the period between two snapshots."""
    return {
        column: getattr(after, field) - getattr(before, field)
        for column, field in COUNTER_COLUMNS.items()
    }


def gauges(snapshot: RouterStatistics) -> dict[str, int]:
    return {column: getattr(snapshot, field) for column, field in GAUGE_COLUMNS.items()}


def stats_line(
    start: int,
    seconds: int,
    before: RouterStatistics,
    after: RouterStatistics,
    active: Mapping[str, int],
) -> str:
    """The line of the period [start, start + seconds) whose ends the snapshots are."""
    return format_line(start, seconds, interval_counts(before, after), gauges(after), active)


def rebase(snapshot: RouterStatistics, counts: Mapping[str, int]) -> RouterStatistics:
    """The snapshot from which `snapshot` is `counts` later (counts as saved by the log)."""
    earlier = {
        field: getattr(snapshot, field) - int(counts.get(column, 0))
        for column, field in COUNTER_COLUMNS.items()
    }
    return replace(snapshot, **earlier)


def _day(ts: int) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def period_resets(old_day_start: int, new_day_start: int) -> tuple[bool, bool]:
    """(week sketch cleared, month sketch cleared) when the day moves on."""
    old, new = _day(old_day_start), _day(new_day_start)
    return _week_start(old) != _week_start(new), (old.year, old.month) != (new.year, new.month)


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
    ) -> None:
        self.path = Path(path)
        self.state_path = (
            Path(state_path) if state_path else self.path.with_name(self.path.name + ".state")
        )
        self._statistics = statistics
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
        # the file work moves to the worker.
        await trio.to_thread.run_sync(self._write, lines, self._state_bytes())
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
            # A clean stop: keep the partial interval for the next start.
            self.save()

    async def _write_next_boundary(self) -> None:
        boundary = self.next_boundary()
        await trio.sleep(max(0.0, boundary - self._wall()))
        now = self._wall()
        if now < boundary - WAKE_SLACK:
            return  # the wall clock was set back while we slept
        # monotonic and wall clocks drift apart a little: a wake-up just before the
        # boundary belongs to it
        lines = self.roll(max(now, boundary))
        if lines:
            log.debug("stats: %d line(s) to %s", len(lines), self.path)
            await self._write_in_thread(lines)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, [data])
