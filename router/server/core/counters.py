"""The router's one set of counters and the frozen record `Router.statistics()` returns.

Counters are plain integers bumped on the hot path and never reset; the record
is a snapshot that callers may keep and compare. Every reader works from them:
the metrics collector, the control port, and the stats log, whose lines are the
differences between two snapshots (statslog.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# The proxy's counters (docs/protocol.md#private-message-routing), the reference's proxy
# statistics: for PRXY (sessions) and PFWD (messages), requests and their outcomes
# (successes include the destination's ERR answers, which are forwarded), each also
# counted apart when the destination is "own" (the reference's pRelays, pRelaysOwn,
# pMsgFwds, pMsgFwdsOwn); and RFWDs this router executed as a destination (pMsgFwdsRecv).
PROXY_OUTCOMES = ("requests", "successes", "errors_connect", "errors_compat", "errors_other")
PROXY_COUNTERS = (
    *(f"proxy_{what}_{outcome}{own}" for what in ("sessions", "messages")
      for own in ("", "_own") for outcome in PROXY_OUTCOMES),
    "proxy_messages_received",
)


class Counters:
    """Monotonic totals, changed only by the router's own tasks."""

    __slots__ = (
        "connections_total", "queues_created", "queues_secured", "queues_deleted",
        "messages_sent", "messages_delivered", "messages_acked", "messages_quota_refused",
        "messages_deferred", "subscriptions_displaced", "writers_stalled", "messages_expired",
        "new_queues_rate_limited", "messages_store_full", "subscriptions_ok", "queues_blocked",
        "messages_large_refused", "notifiers_created", "notifiers_deleted",
        "notifier_subscriptions_ok",
        *PROXY_COUNTERS,
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def snapshot(
        self, *, connections: int, subscriptions: int, pending_deliveries: int,
        proxy_connections: int = 0,
    ) -> RouterStatistics:
        """The totals now, with the gauges only the router can read."""
        totals = {name: getattr(self, name) for name in self.__slots__}
        return RouterStatistics(
            connections=connections, subscriptions=subscriptions,
            pending_deliveries=pending_deliveries, proxy_connections=proxy_connections,
            **totals,
        )

    def count_proxy(self, what: str, outcome: str, own: bool) -> None:
        """One PRXY ("sessions") or PFWD ("messages") outcome, also as own if `own`."""
        name = f"proxy_{what}_{outcome}"
        setattr(self, name, getattr(self, name) + 1)
        if own:
            setattr(self, name + "_own", getattr(self, name + "_own") + 1)


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
    # The proxy (PROXY_COUNTERS): PRXY ("sessions") and PFWD ("messages"), then the
    # same for own destinations only.
    proxy_sessions_requests: int = 0
    proxy_sessions_successes: int = 0
    proxy_sessions_errors_connect: int = 0
    proxy_sessions_errors_compat: int = 0
    proxy_sessions_errors_other: int = 0
    proxy_sessions_requests_own: int = 0
    proxy_sessions_successes_own: int = 0
    proxy_sessions_errors_connect_own: int = 0
    proxy_sessions_errors_compat_own: int = 0
    proxy_sessions_errors_other_own: int = 0
    proxy_messages_requests: int = 0
    proxy_messages_successes: int = 0
    proxy_messages_errors_connect: int = 0
    proxy_messages_errors_compat: int = 0
    proxy_messages_errors_other: int = 0
    proxy_messages_requests_own: int = 0
    proxy_messages_successes_own: int = 0
    proxy_messages_errors_connect_own: int = 0
    proxy_messages_errors_compat_own: int = 0
    proxy_messages_errors_other_own: int = 0
    proxy_messages_received: int = 0  # RFWDs executed here as the destination
    proxy_connections: int = 0  # open now: this router's connections to destinations
