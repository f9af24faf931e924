"""CPU of the WebSocket framing layer alone, per 16 KB block: parse one masked
client frame and serialize the server frame that echoes it, in memory (no
sockets), with the two sans-I/O libraries the router could drive.

    python -m bench framing

This is the measurement behind the router's choice of `websockets` (README,
"Dependencies").
"""

from __future__ import annotations

import os
import struct
import sys
import time

from websockets.protocol import State
from websockets.server import ServerProtocol
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, Message

from router.protocol.block import BLOCK_SIZE

MESSAGES = 20_000
ROUNDS = 3


def client_frame() -> bytes:
    """One masked binary frame carrying a random block, as a client sends it."""
    payload, mask = os.urandom(BLOCK_SIZE), os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BBH", 0x82, 0x80 | 126, BLOCK_SIZE) + mask + masked


def websockets_us(frame: bytes) -> float:
    protocol = ServerProtocol(max_size=BLOCK_SIZE, state=State.OPEN)
    start = time.process_time()
    for _ in range(MESSAGES):
        protocol.receive_data(frame)
        for event in protocol.events_received():
            protocol.send_binary(event.data)
        protocol.data_to_send()
    return (time.process_time() - start) / MESSAGES * 1e6


def wsproto_us(frame: bytes) -> float:
    connection = Connection(ConnectionType.SERVER)
    start = time.process_time()
    for _ in range(MESSAGES):
        connection.receive_data(frame)
        for event in connection.events():
            if isinstance(event, Message):
                connection.send(BytesMessage(event.data))
    return (time.process_time() - start) / MESSAGES * 1e6


def main(argv: list[str] | None = None) -> int:
    if argv:
        print("python -m bench framing: takes no options", file=sys.stderr)
        return 2
    frame = client_frame()
    for i in range(ROUNDS):
        ws, wp = websockets_us(frame), wsproto_us(frame)
        print(f"round {i + 1}: websockets {ws:.1f} us/block, wsproto {wp:.1f} us/block, "
              f"wsproto / websockets {wp / ws:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
