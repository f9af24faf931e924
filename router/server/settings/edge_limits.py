"""The edge's deadlines and caps: one table, `EDGE_BOUNDS`, and the record made from it.

Each row is one bound: its name (the `EdgeLimits` field, the `RouterConfig`
field, the `[TRANSPORT]` key of the configuration file and, with dashes, the
`serve` flag), what it counts (`int`: a number of things, `float`: seconds),
its default and its help line. The record, the configuration's fields and their
checks, the flags and the file's keys are all made from the rows, so a new bound
is one row here plus the code that keeps to it (README "Limits of the listener").
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass


@dataclass(frozen=True, slots=True)
class Bound:
    name: str
    kind: type[int] | type[float]  # int: a count (at least 1), float: seconds (> 0)
    default: int | float
    help: str
    configurable: bool = True  # False: fixed here, no flag and no key


EDGE_BOUNDS = (
    Bound("upgrade_timeout", float, 10.0,
          "seconds a new connection has to send its HTTP request"),
    Bound("max_request_bytes", int, 8192, "bytes of request line and headers",
          configurable=False),
    Bound("max_pending", int, 1024, "connections in the upgrade or SMP handshake, in total"),
    Bound("max_pending_per_address", int, 128,
          "the same, from one remote address (an IPv6 client: its /64)"),
    Bound("max_connections", int, 50_000,
          "open connections (lowered to fit the descriptor limit)"),
    Bound("max_connections_per_address", int, 256,
          "open connections from one remote address (an IPv6 client: its /64)"),
    Bound("fd_headroom", int, 64, "descriptors kept free for stores, logs and refusals",
          configurable=False),
    Bound("max_message_frames", int, 16, "WebSocket frames one block may be split into"),
    Bound("message_timeout", float, 10.0, "seconds from a block's first frame to its last"),
    Bound("keepalive_interval", float, 60.0, "seconds of silence before a client is pinged"),
    Bound("keepalive_timeout", float, 30.0, "seconds a pinged client has to answer"),
    # Set from the router's own settings of these names (RouterConfig.edge_limits).
    Bound("stalled_timeout", float, 30.0,
          "seconds a client may take to read one block before it is dropped",
          configurable=False),
    Bound("close_timeout", float, 2.0, "seconds for the WebSocket closing handshake",
          configurable=False),
)
CONFIGURABLE_BOUNDS = tuple(bound for bound in EDGE_BOUNDS if bound.configurable)


def _record(name: str, bounds: tuple[Bound, ...], doc: str) -> type:
    fields = [(b.name, b.kind, field(default=b.default)) for b in bounds]
    record = make_dataclass(name, fields, frozen=True, slots=True, namespace={"__doc__": doc})
    record.__module__ = __name__
    return record


EdgeLimits = _record(
    "EdgeLimits", EDGE_BOUNDS, "The edge's deadlines and caps (README \"Limits of the listener\")."
)
# The configurable bounds as fields of RouterConfig, which is made on top of this.
EdgeSettings = _record(
    "EdgeSettings", CONFIGURABLE_BOUNDS, "The listener's limits an operator may set."
)
