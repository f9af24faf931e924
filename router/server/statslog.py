"""The router's statistics log: one CSV line per interval plus a daily roll-up.

Theory of operation
-------------------
The router increments plain integers on a `RouterCounters` object as things happen
(a queue created, a message sent, ...) and calls `record_active_queue` with the
recipient id of every queue that sees activity. Nothing else is shared: the router
never awaits anything of this module.

`StatsLog` owns the file. Its `run` task sleeps until the next interval boundary
(aligned to UTC, default hourly), then in one synchronous step takes the counters
(reading and zeroing them, so no increment is lost or counted twice), adds them to
the day's running totals and formats the lines; the file append and the state save
run on a worker thread. When the UTC day changes, a `P1D` roll-up line follows the
last interval line of the day. Lines carry the start of the period they cover.

Active queues per day, ISO week and month are counted in three HyperLogLog
sketches (4096 one-byte registers each) over a 64-bit hash of the recipient id:
bounded memory, no per-queue history and no raw ids, about 1.6% standard error.
The week sketch is cleared when a Monday starts, the month sketch on the 1st.

The counters, the day totals and the sketches are saved to a small JSON state file
next to the log after every line and on a clean stop, and added back at start, so
a restart within an interval keeps counting it. An interval that ended while the
router was stopped is written at start, with the time it began. A crash between
appending a line and saving the state can repeat that line at the next start;
readers keep one line per (period, time), see docs/stats-log.md.
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
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import trio

log = logging.getLogger(__name__)

DAY = 86400
DEFAULT_INTERVAL = 3600
STATE_VERSION = 1
WAKE_SLACK = 1.0  # seconds

# Counters reset at every line: how many times each thing happened in the period.
COUNTER_FIELDS = (
    "queues_created",
    "queues_secured",
    "queues_deleted",
    "msgs_sent",
    "msgs_delivered",
    "msgs_acknowledged",
    "msgs_expired",
    "msgs_quota_refused",
)
# Gauges the router keeps current (increment and decrement); written as they are.
GAUGE_FIELDS = ("subscriptions", "clients")
ACTIVE_FIELDS = ("active_queues_day", "active_queues_week", "active_queues_month")
COLUMNS = ("time", "period", *COUNTER_FIELDS, *GAUGE_FIELDS, *ACTIVE_FIELDS)
HEADER = ",".join(COLUMNS)

# --- HyperLogLog -------------------------------------------------------------

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


# --- the counters the router increments --------------------------------------


class RouterCounters:
    """One int per counter and gauge, plus the active-queue sketches.

    The router writes `counters.msgs_sent += 1` and so on directly, and
    `counters.subscriptions += 1` / `-= 1` for the gauges.
    """

    __slots__ = (*COUNTER_FIELDS, *GAUGE_FIELDS, "active_day", "active_week", "active_month")

    def __init__(self) -> None:
        for name in COUNTER_FIELDS + GAUGE_FIELDS:
            setattr(self, name, 0)
        self.active_day = HyperLogLog()
        self.active_week = HyperLogLog()
        self.active_month = HyperLogLog()

    def record_active_queue(self, recipient_id: bytes) -> None:
        """Count the queue as active today, this week and this month."""
        h = queue_hash(recipient_id)
        self.active_day.add_hash(h)
        self.active_week.add_hash(h)
        self.active_month.add_hash(h)

    def take(self) -> dict[str, int]:
        """The counters since the last take, zeroed in the same step (gauges stay)."""
        counts = {name: getattr(self, name) for name in COUNTER_FIELDS}
        for name in COUNTER_FIELDS:
            setattr(self, name, 0)
        return counts

    def add(self, counts: Mapping[str, int]) -> None:
        for name in COUNTER_FIELDS:
            setattr(self, name, getattr(self, name) + int(counts.get(name, 0)))

    def gauges(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in GAUGE_FIELDS}

    def active(self) -> dict[str, int]:
        return {
            "active_queues_day": self.active_day.estimate(),
            "active_queues_week": self.active_week.estimate(),
            "active_queues_month": self.active_month.estimate(),
        }


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


def sum_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {name: int(a.get(name, 0)) + int(b.get(name, 0)) for name in COUNTER_FIELDS}


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

    Call `restore(now)` before the router starts counting (or let `run` do it:
    `await nursery.start(stats.run)`), and `save()` on a clean stop (`run` does
    this when it is cancelled).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        counters: RouterCounters | None = None,
        *,
        interval: int = DEFAULT_INTERVAL,
        state_path: str | os.PathLike[str] | None = None,
        wall_clock: Callable[[], float] | None = None,
        file_io_in_thread: bool = True,
    ) -> None:
        self.path = Path(path)
        self.state_path = (
            Path(state_path) if state_path else self.path.with_name(self.path.name + ".state")
        )
        self.counters = counters if counters is not None else RouterCounters()
        self.interval = check_interval(interval)
        self._wall = wall_clock or time.time
        # Tests on trio's autojump clock write inline: a worker thread looks idle
        # to the clock, which would then jump past every deadline.
        self._in_thread = file_io_in_thread
        self._interval_start: int | None = None
        self._interval_seconds = self.interval
        self._day_start = 0
        self._day_counts: dict[str, int] = dict.fromkeys(COUNTER_FIELDS, 0)
        self._lines_written = 0
        self._written = trio.Event()

    # -- state ------------------------------------------------------------------

    def restore(self, now: float | None = None) -> list[str]:
        """Add the saved state back and open the current interval.

        Returns the lines of periods that ended while the router was stopped; they
        are written to the file too. Safe to call once, before counting starts.
        """
        now = self._wall() if now is None else now
        lines = self._load_state(now)
        if self._interval_start is None:
            self._start_periods(now)
        self._write(lines, self._state_bytes())
        self._lines_written += len(lines)
        return lines

    def _load_state(self, now: float) -> list[str]:
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("stats state %s unreadable, starting from zero: %s", self.state_path, exc)
            return []
        if state.get("version") != STATE_VERSION:
            log.warning("stats state %s has an unknown version, ignored", self.state_path)
            return []
        self.counters.add(state["counts"])
        for name in ("day", "week", "month"):
            getattr(self.counters, f"active_{name}").merge(
                HyperLogLog.from_text(state["hll"][name])
            )
        self._interval_start = int(state["interval_start"])
        self._interval_seconds = int(state["interval"])
        self._day_start = int(state["day_start"])
        self._day_counts = sum_counts(state["day_counts"], {})
        return self.roll(now)

    def state(self) -> dict:
        """What `save` writes: enough to continue the current interval and day."""
        return {
            "version": STATE_VERSION,
            "interval": self._interval_seconds,
            "interval_start": self._interval_start,
            "day_start": self._day_start,
            "counts": {name: getattr(self.counters, name) for name in COUNTER_FIELDS},
            "day_counts": self._day_counts,
            "hll": {
                "day": self.counters.active_day.to_text(),
                "week": self.counters.active_week.to_text(),
                "month": self.counters.active_month.to_text(),
            },
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

        Synchronous and free of I/O: the counters are read and zeroed in one step.
        Periods that were skipped entirely (the router was stopped) get no line.
        """
        if self._interval_start is None or now < self.next_boundary():
            return []
        counts = self.counters.take()
        self._day_counts = sum_counts(self._day_counts, counts)
        gauges, active = self.counters.gauges(), self.counters.active()
        lines = []
        if self._interval_seconds != DAY:
            lines.append(
                format_line(self._interval_start, self._interval_seconds, counts, gauges, active)
            )
        if now >= self._day_start + DAY:
            lines.append(format_line(self._day_start, DAY, self._day_counts, gauges, active))
            self._new_day(floor_to(now, DAY))
        self._interval_start = floor_to(now, self.interval)
        self._interval_seconds = self.interval
        return lines

    def write_due(self, now: float | None = None) -> list[str]:
        """Roll and write at once, blocking (for tools and tests that drive the log
        without a Trio loop); returns the lines written."""
        lines = self.roll(self._wall() if now is None else now)
        if lines:
            self._write(lines, self._state_bytes())
            self._lines_written += len(lines)
        return lines

    def _new_day(self, day_start: int) -> None:
        week_changed, month_changed = period_resets(self._day_start, day_start)
        self.counters.active_day.clear()
        if week_changed:
            self.counters.active_week.clear()
        if month_changed:
            self.counters.active_month.clear()
        self._day_start = day_start
        self._day_counts = dict.fromkeys(COUNTER_FIELDS, 0)

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

    def statistics(self) -> dict[str, int]:
        return {"lines_written": self._lines_written}

    async def wait_lines_written(self, count: int) -> None:
        """Wait until `count` lines in total have reached the file (for tests and tools)."""
        while self._lines_written < count:
            await self._written.wait()

    def _notify_written(self) -> None:
        self._written.set()
        self._written = trio.Event()

    async def _file_io(self, fn: Callable[..., object], *args: object) -> None:
        if self._in_thread:
            await trio.to_thread.run_sync(fn, *args)
        else:
            fn(*args)
            await trio.lowlevel.checkpoint()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write a line at every interval boundary until cancelled; then save the state."""
        if self._interval_start is None:
            await self._file_io(self.restore, self._wall())
            self._notify_written()
        task_status.started()
        try:
            while True:
                boundary = self.next_boundary()
                await trio.sleep(max(0.0, boundary - self._wall()))
                now = self._wall()
                if now < boundary - WAKE_SLACK:
                    continue  # the wall clock was set back while we slept
                # monotonic and wall clocks drift apart a little: a wake-up just
                # before the boundary belongs to it
                lines = self.roll(max(now, boundary))
                if lines:
                    log.debug("stats: %d line(s) to %s", len(lines), self.path)
                    await self._file_io(self._write, lines, self._state_bytes())
                    self._lines_written += len(lines)
                    self._notify_written()
        finally:
            # A clean stop: keep the partial interval for the next start.
            self.save()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
