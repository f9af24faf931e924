"""The one stats log of a router of several workers
(docs/workers.md#one-router-to-the-operator, docs/stats-log.md).

The supervisor writes the log at the configured path, in the columns and at the
interval of one process (ops/statslog.py, the same `StatsLog`), from the workers'
figures: it asks every worker `stats` (operations.py) at each interval boundary
and every `COLLECT_PERIOD` between them, and keeps the router's totals itself.

- **Counts** (queues created, messages sent, ...): each worker's totals grow from
  its start; the supervisor adds each worker's growth since its last answer to the
  router's totals. A worker whose pid changed, or one of whose totals went down, was
  started again: its totals count from zero. What a worker counted after its last
  answer and before it died is lost (at most `COLLECT_PERIOD` of its counts).
- **Gauges** (subscriptions, clients): the sum of the answers of the last
  collection. A worker that did not answer adds nothing to them (a dead worker's
  clients are gone); its counts come with its next answer, in a later line.
- **Active queues**: each worker keeps one sketch of the queues active since its
  last answer and starts it over when it answers; the supervisor merges it into its
  day, week and month sketches, as one process adds each queue to the three.

A worker that does not answer at a boundary never stops the line: it is written
from what answered, and a warning in the log names the workers that did not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import trio

from ..core.counters import RouterStatistics
from ..ops.active_queues import HyperLogLog
from ..ops.statslog import StatsLog

log = logging.getLogger("smp-router")

# Seconds between two collections inside an interval: what a worker killed loses at most.
# A collection costs the supervisor ~5 ms of CPU with 2 workers (asks, JSON, sketches
# merged), so every 10 s is ~0.05 % of a core; every 60 s lost a minute of counts.
COLLECT_PERIOD = 10.0
GAUGE_FIELDS = frozenset({"connections", "subscriptions", "pending_deliveries",
                          "proxy_connections"})
COUNT_FIELDS = tuple(f.name for f in fields(RouterStatistics) if f.name not in GAUGE_FIELDS)
ZERO = RouterStatistics(**{f.name: 0 for f in fields(RouterStatistics)})

Ask = Callable[[str], Awaitable[Sequence[bytes | None]]]  # every worker's answer, or None


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    """One worker's answer to `stats`."""

    pid: int
    statistics: RouterStatistics
    active: HyperLogLog | None

    @classmethod
    def parse(cls, answer: bytes) -> WorkerFigures:
        value = json.loads(answer)
        known = {f.name for f in fields(RouterStatistics)}
        statistics = RouterStatistics(**{name: int(number) for name, number
                                         in value["statistics"].items() if name in known})
        active = value.get("active")
        return cls(int(value["pid"]), statistics,
                   None if active is None else HyperLogLog.from_text(active))


def growth(before: RouterStatistics | None, after: RouterStatistics) -> dict[str, int]:
    """What a worker counted between two of its answers; all of `after` if the worker
    started again in between (`before` None, or a total went down)."""
    if before is not None and all(getattr(after, name) >= getattr(before, name)
                                  for name in COUNT_FIELDS):
        return {name: getattr(after, name) - getattr(before, name) for name in COUNT_FIELDS}
    return {name: getattr(after, name) for name in COUNT_FIELDS}


class WorkersStatistics:
    """The router's statistics put together from its workers' answers (module doc).

    `statistics()` is what `StatsLog` reads (synchronously); `collect()` asks the
    workers and is awaited before each of the log's lines (`StatsLog(refresh=...)`)."""

    def __init__(self, count: int, ask_all: Ask,
                 merge_active: Callable[[HyperLogLog], None]) -> None:
        self._ask_all = ask_all
        self._merge_active = merge_active
        self._last: list[WorkerFigures | None] = [None] * count
        self._totals = dict.fromkeys(COUNT_FIELDS, 0)
        self._gauges = dict.fromkeys(GAUGE_FIELDS, 0)
        self._lock = trio.Lock()
        self.unanswered: list[int] = []  # the workers that did not answer the last collection
        self.stats_log: StatsLog | None = None  # the log it serves (run_stats_log)
        self.final = False  # the workers are stopping: their last figures are taken

    def statistics(self) -> RouterStatistics:
        return replace(ZERO, **self._totals, **self._gauges)

    async def collect(self) -> None:
        if self.final:
            return
        async with self._lock:
            answers = await self._ask_all("stats")
            gauges = dict.fromkeys(GAUGE_FIELDS, 0)
            unanswered = []
            for index, answer in enumerate(answers):
                figures = self._figures(index, answer)
                if figures is None:
                    unanswered.append(index)
                    continue
                self._take(index, figures)
                for name in GAUGE_FIELDS:
                    gauges[name] += getattr(figures.statistics, name)
            self._gauges = gauges
            self.unanswered = unanswered

    def _figures(self, index: int, answer: bytes | None) -> WorkerFigures | None:
        if answer is None:
            return None
        try:
            return WorkerFigures.parse(answer)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("stats log: worker %d's figures unreadable: %r", index, e)
            return None

    def _take(self, index: int, figures: WorkerFigures) -> None:
        last = self._last[index]
        before = last.statistics if last is not None and last.pid == figures.pid else None
        for name, grown in growth(before, figures.statistics).items():
            self._totals[name] += grown
        self._last[index] = figures
        if figures.active is not None:
            self._merge_active(figures.active)

    async def collect_final(self) -> None:
        """The workers' last figures before they stop (the log saves them when it ends)."""
        await self.collect()
        self.final = True

    async def refresh_for_line(self) -> None:
        """Before a line of the log: collect, and name the workers that did not answer."""
        await self.collect()
        if self.unanswered:
            log.warning("stats log: worker(s) %s did not answer; the line has the others' "
                        "figures, theirs come in a later line (lost if the worker ended)",
                        ", ".join(map(str, self.unanswered)))

    async def run(self, period: float = COLLECT_PERIOD) -> None:
        """Collect every `period` seconds until cancelled: a worker that dies loses at
        most that much of its counts."""
        while True:
            await trio.sleep(period)
            await self.collect()


async def run_stats_log(
    path: Path, interval: int, count: int, ask_all: Ask,
    *, task_status: trio.TaskStatus[WorkersStatistics] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The router's one stats log at `path`, written by the supervisor until cancelled
    (then its state is saved, as one process saves it)."""
    stats_log: StatsLog | None = None

    def merge_active(sketch: HyperLogLog) -> None:
        if stats_log is not None:
            stats_log.active.merge_sketch(sketch)

    figures = WorkersStatistics(count, ask_all, merge_active)
    stats_log = figures.stats_log = StatsLog(path, figures.statistics, interval=interval,
                                             refresh=figures.refresh_for_line)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats_log.run)
        nursery.start_soon(figures.run)
        task_status.started(figures)
