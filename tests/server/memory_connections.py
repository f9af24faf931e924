"""Router connections with no socket: the router's end of `memory_block_pair`."""

from __future__ import annotations

from router.server.connection import Connection
from router.server.transport import Handshake, memory_block_pair


def connection(conn_id: int, send_queue_size: int = 1, version: int = 10) -> Connection:
    """A connection past its handshake, not running: what it would send stays in its
    outbox for the test to read. Call from inside a Trio run."""
    _, served = memory_block_pair()
    return Connection(conn_id, served, Handshake(version, b"s" * 32, None, None), send_queue_size)
