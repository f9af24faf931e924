"""Private message routing to a router of two workers (docs/workers.md#hand-offs-in-blocks):
the proxy's connection lands on one worker, the queue is the other's; the RFWD is
opened where it landed and its SEND runs in the queue's owner."""

from __future__ import annotations

import os

import trio
from loopback_router import running_router

from router.client import MessageEvent, SMPError, open_client
from router.protocol import crypto
from router.protocol.codec import decode_response, encode_command
from router.protocol.transmission import Transmission, decode_transmission, encode_transmission
from router.protocol.types import AUTH, ERR, OK, PING, SEND, SKEY
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers.in_process import workers_in_process

OWNER = Ownership(2, 0).owner_of
PROXY = {"proxy_allow_destinations": ("127.0.0.0/8",), "allow_proxy": True,
         "proxy_connect_timeout": 5.0, "proxy_answer_timeout": 5.0}


async def test_proxied_sends_to_a_queue_of_the_other_worker_are_delivered(tmp_path) -> None:
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path)
    async with (
        workers_in_process(config) as (owner, front),
        running_router(**PROXY) as proxy,
        open_client(owner.address) as recipient,
    ):
        queues = [await recipient.create_queue(snd_secure=False) for _ in range(3)]
        assert {OWNER(q.sender_id) for q in queues} == {0}
        for queue in queues:
            await recipient.subscribe(queue)
        senders = 4
        async with trio.open_nursery() as nursery:
            for n in range(senders):
                nursery.start_soon(_send_through, proxy.address, front.address, queues, n)
            got: dict[bytes, set[bytes]] = {q.recipient_id: set() for q in queues}
            queue_of = {q.recipient_id: q for q in queues}
            with trio.fail_after(20):
                for _ in range(senders * 5 * len(queues)):
                    event = await recipient.next_event()
                    assert isinstance(event, MessageEvent)
                    got[event.recipient_id].add(event.body)
                    await recipient.ack(queue_of[event.recipient_id], event.msg_id)
        assert all(len(bodies) == senders * 5 for bodies in got.values())
        # Opened in the front, run in the owner: its store has the messages.
        assert front.router.statistics().proxy_messages_received == senders * 5 * len(queues)
        assert owner.router.statistics().messages_sent == senders * 5 * len(queues)
        assert front.router.statistics().messages_sent == 0


async def _send_through(proxy: str, destination: str, queues, n: int) -> None:
    async with open_client(proxy) as sender:
        session = await sender.open_proxied_session(destination)
        for i in range(5):
            for queue in queues:
                await sender.proxied_send(session, queue.sender_id, b"%d/%d" % (n, i))


async def test_a_sender_secures_a_queue_of_the_other_worker_through_the_proxy(
        tmp_path) -> None:
    """SKEY, then signed SENDs, forwarded; the owner's errors come back inside RRES."""
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path)
    async with (
        workers_in_process(config) as (owner, front),
        running_router(**PROXY) as proxy,
        open_client(owner.address) as recipient,
        open_client(proxy.address) as sender,
    ):
        queue = await recipient.create_queue(snd_secure=True)
        session = await sender.open_proxied_session(front.address)
        seed, key = crypto.new_ed25519()
        assert await sender.proxied_command(session, queue.sender_id, SKEY(key), seed) == OK()
        await sender.proxied_send(session, queue.sender_id, b"signed", sender_seed=seed)
        await recipient.subscribe(queue)
        with trio.fail_after(10):
            event = await recipient.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"signed"
        # Unsigned, to a secured queue: the owner's AUTH, for the client only.
        assert await sender.proxied_command(session, queue.sender_id,
                                            SEND(b"F", b"x")) == ERR(AUTH)
        unknown = next(i for i in iter(lambda: os.urandom(24), None) if OWNER(i) == 0)
        try:
            await sender.proxied_send(session, unknown, b"x")
        except SMPError as e:
            assert e.error == AUTH
        else:
            raise AssertionError("a SEND to no queue was answered OK")
        assert owner.router.statistics().proxy_messages_received == 0
        assert front.router.statistics().proxy_messages_received == 4


async def test_one_part_carries_several_forwarded_transmissions_to_their_owner(
        tmp_path) -> None:
    """The owner's side of a block's RFWDs for it: one part, each transmission run with
    its own version, the answers in their order (as `Forwarded.answer_many` sends)."""
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", data_dir=tmp_path)
    async with (
        workers_in_process(config) as (owner, front),
        open_client(owner.address) as recipient,
        open_client(front.address) as proxy_side,
    ):
        queues = [await recipient.create_queue(snd_secure=False) for _ in range(3)]
        await proxy_side.command(b"", PING())  # its connection is served in the front now
        [conn] = front.router.connections.values()
        client = front.router.subscriptions._subscribers[conn]
        route = front.router.dispatcher._forwarded.route
        version = conn.version
        sends = [encode_transmission(Transmission(
            b"", b"%d" % n * 24, q.sender_id, encode_command(SEND(b"F", b"%d" % n), version)),
            version) for n, q in enumerate(queues)]
        unknown = encode_transmission(Transmission(
            b"", b"u" * 24, os.urandom(24), encode_command(SEND(b"F", b"x"), version)), version)
        answers = await route.run_elsewhere(client, 0, [(t, version) for t in sends]
                                            + [(unknown, version)])
        decoded = [decode_transmission(a, version) for [a] in answers]
        assert [t.corr_id for t in decoded] == [b"%d" % n * 24 for n in range(3)] + [b"u" * 24]
        assert [decode_response(t.command, version) for t in decoded] == [OK()] * 3 + [
            ERR(AUTH)]
        assert owner.router.statistics().messages_sent == 3
        for n, queue in enumerate(queues):
            message = await recipient.get(queue)
            assert message is not None and message.body == b"%d" % n
