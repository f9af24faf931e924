"""The edge's deadlines and caps, as the listener and each WebSocket use them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The edge's deadlines and caps (README "Limits of the listener")."""

    upgrade_timeout: float = 10.0  # seconds from accept to a complete request head
    max_request_bytes: int = 8192  # request line and headers
    max_pending: int = 1024  # connections in the upgrade or SMP handshake, in total
    max_pending_per_address: int = 128  # the same, from one remote address
    max_connections: int = 50_000  # every open connection; lowered to fit the fd limit
    fd_headroom: int = 64  # descriptors kept free for stores, logs and refusals
    max_message_frames: int = 16  # frames of one message (a block)
    message_timeout: float = 10.0  # seconds from a message's first frame to its last
    keepalive_interval: float = 60.0  # a silent peer is pinged after this long
    keepalive_timeout: float = 30.0  # and dropped if still silent this long after the ping
    stalled_timeout: float = 30.0  # a peer that takes longer to accept one block is dropped
    close_timeout: float = 2.0  # the WebSocket closing handshake
