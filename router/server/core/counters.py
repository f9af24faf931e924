"""The router's one set of counters and the frozen record `Router.statistics()` returns.

Counters are plain integers bumped on the hot path and never reset; the record
is a snapshot that callers may keep and compare. Every reader works from them:
the metrics collector, the control port, and the stats log, whose lines are the
differences between two snapshots (statslog.py).
"""

from __future__ import annotations

from dataclasses import dataclass


class Counters:
    """Monotonic totals, changed only by the router's own tasks."""

    __slots__ = (
        "connections_total", "queues_created", "queues_secured", "queues_deleted",
        "messages_sent", "messages_delivered", "messages_acked", "messages_quota_refused",
        "messages_deferred", "subscriptions_displaced", "writers_stalled", "messages_expired",
        "new_queues_rate_limited", "messages_store_full", "subscriptions_ok", "queues_blocked",
        "messages_large_refused", "notifiers_created", "notifiers_deleted",
        "notifier_subscriptions_ok",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def snapshot(
        self, *, connections: int, subscriptions: int, pending_deliveries: int
    ) -> RouterStatistics:
        """The totals now, with the gauges only the router can read."""
        totals = {name: getattr(self, name) for name in self.__slots__}
        return RouterStatistics(
            connections=connections, subscriptions=subscriptions,
            pending_deliveries=pending_deliveries, **totals,
        )


@dataclass(frozen=True, slots=True)
class RouterStatistics:
    connections: int  # open now (handshake done)
    connections_total: int  # accepted since start
    subscriptions: int  # queues subscribed now, router-wide
    pending_deliveries: int  # entries in every client's deliveries map now
    queues_created: int
    queues_secured: int
    queues_deleted: int
    messages_sent: int  # SENDs stored
    messages_delivered: int  # MSG written for a recipient (pushed or as a response)
    messages_acked: int  # messages deleted by ACK
    messages_quota_refused: int  # SENDs answered ERR QUOTA
    messages_deferred: int  # pushes that found the outbox full and went to the deliveries map
    subscriptions_displaced: int  # END sent because another connection took over
    writers_stalled: int  # connections dropped for not reading
    messages_expired: int = 0  # messages removed for being older than the message TTL
    new_queues_rate_limited: int = 0  # NEWs refused by the new-queue rate limit
    messages_store_full: int = 0  # SENDs refused because the store was full
    subscriptions_ok: int = 0  # SUBs answered OK
    queues_blocked: int = 0  # queues blocked from the control port
    messages_large_refused: int = 0  # SENDs answered ERR LARGE_MSG
    notifiers_created: int = 0  # NKEYs answered NID
    notifiers_deleted: int = 0  # NDELs that removed a notifier
    notifier_subscriptions_ok: int = 0  # NSUBs answered OK
