"""Router connections with no socket: the router's end of `memory_block_pair`."""

from __future__ import annotations

from router.server.core.connection import Connection
from router.server.edge.handshake import Handshake, ServiceSession
from router.server.edge.transports import memory_block_pair


def connection(
    conn_id: int, send_queue_size: int = 1, version: int = 10,
    service: ServiceSession | None = None,
) -> Connection:
    """A connection past its handshake (acting for `service`, as the edge hands the
    core a service it has proven, if given), not running: what it would send stays
    in its outbox for the test to read."""
    _, served = memory_block_pair()
    handshake = Handshake(version, bytes([conn_id % 256]) * 32, None, client_service=service)
    return Connection(conn_id, served, handshake, send_queue_size)
