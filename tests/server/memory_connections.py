"""Router connections with no socket: the router's end of `memory_block_pair`."""

from __future__ import annotations

from router.protocol.handshake import ServiceProof
from router.server.core.connection import Connection
from router.server.edge.handshake import Handshake
from router.server.edge.transports import memory_block_pair


def connection(
    conn_id: int, send_queue_size: int = 1, version: int = 10,
    service: ServiceProof | None = None,
) -> Connection:
    """A connection past its handshake (with `service` proven in it, if given), not
    running: what it would send stays in its outbox for the test to read."""
    _, served = memory_block_pair()
    handshake = Handshake(version, bytes([conn_id % 256]) * 32, None, service)
    return Connection(conn_id, served, handshake, send_queue_size)
