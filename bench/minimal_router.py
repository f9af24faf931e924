"""A minimal SMP router: a benchmark fixture, the floor of the router's design in Python.

Never a router to run: `python -m bench hotpath` serves its load with it beside the
real router, so that what the router's own structure costs shows apart from what
any router on the same parts pays. It is built on the project's codec and crypto
(router/protocol) and the router's listener, handshake and transports
(router/server/edge), and serves only what that load uses: the handshake (with
block encryption from v11, docs/protocol.md#block-encryption), NEW, KEY, SUB, SEND,
ACK and the MSG push (docs/protocol.md#command-table), with every signature checked
as the router checks it (docs/protocol.md#authorization).

Every block is answered by the task that read it: no outbox, no send task, no
delivery task, no lock of its own. A SEND's MSG is written into the recipient's
transport by the sender's task (the transport orders concurrent writers). Queues
live in two dicts. Left out against the router: stores, rate limits, turns, END
to a displaced subscriber, notifications, services, proxying, expiry, statistics,
and any ordering between a block's answers and a push from another task.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from dataclasses import dataclass, field

from router.protocol.block import decode_batch, encode_batches
from router.protocol.codec import check_credentials, decode_command, encode_response_transmission
from router.protocol.crypto import box_key, encrypt_msg_body, new_x25519, verify_authorization
from router.protocol.transmission import authorized_bytes, decode_transmission
from router.protocol.types import (
    ACK,
    AUTH,
    BLOCK,
    CMD_PROHIBITED,
    ERR,
    IDS,
    KEY,
    MSG,
    NEW,
    NO_MSG,
    OK,
    QUOTA,
    SEND,
    SOK,
    SUB,
    ProtocolError,
    Response,
    Transmission,
)
from router.server.edge.block_stream import BlockStream, TransportClosed
from router.server.edge.encrypted import EncryptedTransport
from router.server.edge.handshake import server_handshake
from router.server.edge.identity import RouterIdentity

ID_SIZE = 24  # docs/protocol.md#limits
QUOTA_MESSAGES = 128  # the router's default quota, so that a backlog is bounded alike
HANDSHAKE_TIMEOUT = 30.0


@dataclass(slots=True, eq=False)
class Queue:
    recipient_id: bytes
    sender_id: bytes
    recipient_key: bytes  # SPKI
    box_key: bytes  # crypto_box key of the MSG bodies (docs/protocol.md#encryption)
    sender_key: bytes | None
    messages: deque[tuple[bytes, int, bytes, bytes]] = field(default_factory=deque)
    subscriber: Client | None = None
    in_flight: bytes | None = None  # the msg id pushed and not yet ACKed


class Client:
    __slots__ = ("blocks", "version", "session_id", "router_dh_private", "queues")

    def __init__(self, blocks: BlockStream, version: int, session_id: bytes,
                 router_dh_private: bytes | None) -> None:
        self.blocks = blocks
        self.version = version
        self.session_id = session_id
        self.router_dh_private = router_dh_private
        self.queues: list[Queue] = []  # subscribed by this client


# (recipient, transmissions) pushes a block's answers cause on other connections
Pushes = list[tuple[Client, list[bytes]]]


class MinimalRouter:
    def __init__(self, identity: RouterIdentity) -> None:
        self.identity = identity
        self.by_recipient: dict[bytes, Queue] = {}
        self.by_sender: dict[bytes, Queue] = {}

    def add(self, queue: Queue) -> None:
        self.by_recipient[queue.recipient_id] = queue
        self.by_sender[queue.sender_id] = queue

    async def serve(self, transport: BlockStream, scope: object = None) -> None:
        """The listener's connection handler: handshake, then block in, answers out
        (`scope`, the connection's cancel scope, is the listener's to cancel)."""
        client = None
        try:
            hs = await server_handshake(transport, self.identity.key_hash, HANDSHAKE_TIMEOUT,
                                        self.identity, transport.web_challenge)
            transport.established()
            blocks = transport if hs.cipher is None else EncryptedTransport(transport, hs.cipher)
            client = Client(blocks, hs.version, hs.session_id, hs.router_dh_private)
            while True:
                pushes: Pushes = []
                answers = self.answer(client, await blocks.receive_block(), pushes)
                for recipient, transmissions in pushes:
                    try:
                        await recipient.blocks.send_blocks(encode_batches(transmissions))
                    except TransportClosed:
                        pass  # the recipient's own task ends its connection
                if answers:
                    await blocks.send_blocks(encode_batches(answers))
        except TransportClosed:
            pass
        finally:
            if client is not None:
                for queue in client.queues:
                    if queue.subscriber is client:
                        queue.subscriber, queue.in_flight = None, None
            await transport.aclose(0)

    def answer(self, client: Client, block: bytes, pushes: Pushes) -> list[bytes]:
        try:
            raws = decode_batch(block)
        except ProtocolError:
            return [_encode(b"", b"", ERR(BLOCK), client.version)]
        out: list[bytes] = []
        for raw in raws:
            try:
                t = decode_transmission(raw, client.version)
            except ProtocolError as e:
                out.append(_encode(b"", b"", ERR(e.error), client.version))
                continue
            try:
                out.extend(self._command(client, t, pushes))
            except ProtocolError as e:
                out.append(_encode(t.corr_id, t.entity_id, ERR(e.error), client.version))
        return out

    def _command(self, client: Client, t: Transmission, pushes: Pushes) -> list[bytes]:
        version = client.version
        cmd = decode_command(t.command, version)
        error = check_credentials(cmd, t)
        if error is not None:
            raise ProtocolError(error)
        kind = type(cmd)
        queue: Queue | None = None
        if kind is NEW:
            key = cmd.rcv_auth_key
        elif kind is SEND:
            queue = self.by_sender.get(t.entity_id)
            key = None if queue is None else queue.sender_key
        elif kind in (KEY, SUB, ACK):
            queue = self.by_recipient.get(t.entity_id)
            key = None if queue is None else queue.recipient_key
        else:
            raise ProtocolError(CMD_PROHIBITED)
        signed = authorized_bytes(client.session_id, t.corr_id, t.entity_id, t.command)
        if not verify_authorization(t.authorization, key, signed, corr_id=t.corr_id,
                                    router_dh_private=client.router_dh_private) or key is None:
            raise ProtocolError(AUTH)

        def reply(resp: Response) -> list[bytes]:
            return [_encode(t.corr_id, t.entity_id, resp, version)]

        if kind is NEW:
            srv_private, srv_public = new_x25519()
            queue = Queue(secrets.token_bytes(ID_SIZE), secrets.token_bytes(ID_SIZE),
                          cmd.rcv_auth_key, box_key(srv_private, cmd.rcv_dh_key), None)
            self.add(queue)
            if cmd.subscribe:
                self._subscribe(client, queue)
            return reply(IDS(queue.recipient_id, queue.sender_id, srv_public, cmd.snd_secure))
        assert queue is not None
        if kind is KEY:
            if queue.sender_key not in (None, cmd.sender_key):
                raise ProtocolError(AUTH)
            queue.sender_key = cmd.sender_key
            return reply(OK())
        if kind is SUB:
            self._subscribe(client, queue)
            out = reply(SOK(None))
            if queue.messages:
                out.append(_push(queue, b"", version))
            return out
        if kind is SEND:
            if len(queue.messages) >= QUOTA_MESSAGES:
                raise ProtocolError(QUOTA)
            queue.messages.append((secrets.token_bytes(ID_SIZE), int(time.time()),
                                   cmd.flags[:1], cmd.body))
            recipient = queue.subscriber
            if recipient is not None and queue.in_flight is None:
                pushes.append((recipient, [_push(queue, b"", recipient.version)]))
            return reply(OK())
        # ACK
        if queue.subscriber is not client or queue.in_flight is None or (
            cmd.msg_id and cmd.msg_id != queue.in_flight
        ):
            raise ProtocolError(NO_MSG)
        queue.messages.popleft()
        queue.in_flight = None
        if queue.messages:
            return [_push(queue, t.corr_id, version)]
        return reply(OK())

    def _subscribe(self, client: Client, queue: Queue) -> None:
        if queue.subscriber is not client:
            queue.subscriber = client
            client.queues.append(queue)
        queue.in_flight = None  # SUB again sends the head again


def _push(queue: Queue, corr_id: bytes, version: int) -> bytes:
    """The MSG of the queue's head, which is in flight from now."""
    msg_id, ts, flags, body = queue.messages[0]
    queue.in_flight = msg_id
    enc = encrypt_msg_body(queue.box_key, msg_id, ts, flags, body)
    return _encode(corr_id, queue.recipient_id, MSG(msg_id, enc), version)


def _encode(corr_id: bytes, entity_id: bytes, resp: Response, version: int) -> bytes:
    return encode_response_transmission(corr_id, entity_id, resp, version)
