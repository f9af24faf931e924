"""A first message: NEW, SEND, SUB, the pushed MSG, ACK (README, "A first message").

    .venv/bin/python examples/hello.py 'smp://<keyHash>@127.0.0.1:5224'
"""

import sys

import trio

from router.client import open_client


async def main(address: str) -> None:
    async with open_client(address) as client:
        queue = await client.create_queue()           # NEW: a queue, its keys, its ids
        await client.send(queue.sender_id, b"hello")  # SEND, as its sender would
        await client.subscribe(queue)                 # SUB: its messages come to us
        event = await client.next_event()             # the pushed MSG, decrypted
        print(event.body.decode())
        await client.ack(queue, event.msg_id)         # ACK: the router may drop it


trio.run(main, sys.argv[1])
