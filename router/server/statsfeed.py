"""Feeding the stats log (statslog.py) from the router's own statistics.

The router keeps monotonic totals (`Router.statistics()`); the stats log wants
per-interval counts that it reads and zeroes itself (`RouterCounters.take`).
`FedCounters` bridges the two without touching the hot path: whenever the log
takes the counters (at an interval boundary, synchronously), they first pull
what the router's totals grew by since the last pull, and the gauges are set
to the router's current values. So no count is lost or counted twice, and the
router increments nothing but its own integers.

`run_stats_log` runs the log as a task of the router: it restores the saved
state at start (writing lines for intervals that ended while the router was
stopped), writes a line at every boundary, and on a clean stop pulls the last
counts and saves them for the next start.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .stats import RouterStatistics
from .statslog import RouterCounters, StatsLog

# stats log column -> RouterStatistics field that counts the same thing
FEED = {
    "queues_created": "queues_created",
    "queues_secured": "queues_secured",
    "queues_deleted": "queues_deleted",
    "msgs_sent": "messages_sent",
    "msgs_delivered": "messages_delivered",
    "msgs_acknowledged": "messages_acked",
    "msgs_expired": "messages_expired",
    "msgs_quota_refused": "messages_quota_refused",
}


class FedCounters(RouterCounters):
    """RouterCounters that fill themselves from the router's totals when taken."""

    __slots__ = ("_source", "_seen")

    def __init__(self, source: Callable[[], RouterStatistics]) -> None:
        super().__init__()
        self._source = source
        self._seen = dict.fromkeys(FEED, 0)

    def pull(self) -> None:
        """Add what the router's totals grew by since the last pull; refresh the gauges."""
        stats = self._source()
        for column, attr in FEED.items():
            total = getattr(stats, attr)
            setattr(self, column, getattr(self, column) + total - self._seen[column])
            self._seen[column] = total
        self.subscriptions = stats.subscriptions
        self.clients = stats.connections

    def take(self) -> dict[str, int]:
        self.pull()
        return super().take()


async def run_stats_log(
    stats: StatsLog, counters: FedCounters,
    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`stats.run()`, with the counts since the last line saved on a clean stop."""
    try:
        await stats.run(task_status=task_status)
    finally:
        counters.pull()
        stats.save()
