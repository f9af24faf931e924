"""Private message routing with two routers (README, "Two routers: private message routing").

Bob's queue is on router B; Alice is connected to router A only and sends through it,
so B never sees Alice's address and A never sees the command
(docs/protocol.md#private-message-routing).

    .venv/bin/python examples/private_routing.py 'smp://<keyHashA>@127.0.0.1:5224' \\
        'smp://<keyHashB>@127.0.0.1:5225'
"""

import sys

import trio

from router.client import open_client


async def main(proxy: str, destination: str) -> None:
    async with open_client(destination) as bob, open_client(proxy) as alice:
        queue = await bob.create_queue()                         # NEW on B
        session = await alice.open_proxied_session(destination)  # PRXY: A connects to B
        await alice.proxied_send(session, queue.sender_id, b"hello through A")  # PFWD
        await bob.subscribe(queue)                               # SUB on B
        event = await bob.next_event()
        print(event.body.decode())
        await bob.ack(queue, event.msg_id)


trio.run(main, sys.argv[1], sys.argv[2])
