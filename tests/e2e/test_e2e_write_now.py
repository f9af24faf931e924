"""A MSG for an idle subscriber is written by the sender's task, without waiting
(docs/architecture.md, "The data path"); when the subscriber's socket does not
take all of it, the rest is the transport's, and the subscriber's delivery task
sends it first: the subscriber gets every message, whole and once, in the end.

A raw WebSocket recipient that does not read while the messages are sent, the
router's socket buffer for it made small so that the writes made now fill it."""

from __future__ import annotations

import socket

import pytest
import trio
from e2e_helpers import create_queues, raw_connection, send_many

from router.client import open_client
from router.protocol import crypto
from router.protocol.block import BatchPacker, decode_batch
from router.protocol.codec import decode_response, encode_command
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import MSG, OK, SUB, Transmission
from router.server.edge.websocket import WebSocketTransport

QUEUES = 40


@pytest.mark.parametrize("store_kind", ["memory"])
@pytest.mark.parametrize("delivery", ["single-task"])
async def test_writes_made_now_that_the_socket_cannot_take_all_arrive_whole(
    router_factory, monkeypatch
):
    info = await router_factory()
    written_now: list[bool] = []
    send_blocks_now = WebSocketTransport.send_blocks_now

    def recorded(self: WebSocketTransport, blocks: list[bytes]) -> bool:
        written_now.append(send_blocks_now(self, blocks))
        return written_now[-1]

    monkeypatch.setattr(WebSocketTransport, "send_blocks_now", recorded)
    with trio.fail_after(60):
        async with (
            open_client(info.address) as owner,
            open_client(info.address) as sender,
            raw_connection(info, message_queue_size=1) as (ws, session_id),
        ):
            queues = await create_queues(owner, QUEUES)
            packer = BatchPacker()
            for n, q in enumerate(queues):
                corr_id = n.to_bytes(24, "big")
                body = encode_command(SUB())
                auth = crypto.authorize(q.rcv_auth_seed, session_id, corr_id, q.recipient_id, body)
                t = Transmission(auth, corr_id, q.recipient_id, body)
                assert packer.add(encode_transmission(t))
            await ws.send_message(packer.take_block())
            answers = []
            while len(answers) < QUEUES:
                block = await ws.get_message()
                answers.extend(decode_transmission(raw) for raw in decode_batch(block))
            assert [decode_response(a.command) for a in answers] == [OK()] * QUEUES

            conn = info.router.connection_for_session(session_id)
            conn.transport.inner._socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            bodies = {q.recipient_id: f"message {n}".encode() for n, q in enumerate(queues)}
            await send_many(sender, [(q.sender_id, bodies[q.recipient_id]) for q in queues])

            received: dict[bytes, bytes] = {}
            boxes = {q.recipient_id: q.box_key for q in queues}
            while len(received) < QUEUES:
                for raw in decode_batch(await ws.get_message()):
                    t = decode_transmission(raw)
                    msg = decode_response(t.command)
                    assert isinstance(msg, MSG) and t.entity_id not in received, msg
                    received[t.entity_id] = crypto.decrypt_msg_body(
                        boxes[t.entity_id], msg.msg_id, msg.enc_body).body
    assert received == bodies
    assert False in written_now, "the socket took every write: nothing was left to send later"
