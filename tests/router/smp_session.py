"""An SMP client made of the protocol codec alone, over `memory_block_pair`.

It sends the blocks a test builds and hands back the transmissions the router
writes, with no client library between them: what a test asserts is what the
router put on the wire. Pushed transmissions (MSG, END, ... with an empty
correlation id) are kept in `events` in arrival order.

A session can act for a service (docs/protocol.md#client-service): it speaks v19,
sends the certificate chain and a session key its leaf signs in a `clientService`,
and signs NEW, SUB and NSUB as a service session does. Over the memory pair there is
no TLS, so the router's end is handed the chain as the client certificate a TLS edge
would have verified (`MemoryBlockTransport.peer_chain`); the router checks the
hello against it as over TLS. The TLS path itself is tested end to end in
test_router_service_certificates.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.service_client import ServiceCert, ed25519_spki, signed_key
from router.protocol import crypto, versions
from router.protocol.block import (
    BatchPacker,
    decode_batch,
    encode_batches,
    pad_block,
    unpad_block,
)
from router.protocol.codec import decode_response, encode_command
from router.protocol.crypto import MessageBody
from router.protocol.handshake import (
    ClientHello,
    ClientServiceCert,
    ServerHello,
    decode_server_hello,
    decode_service_handshake_result,
    encode_client_hello,
)
from router.protocol.transmission import (
    authorized_bytes,
    decode_transmission,
    encode_transmission,
)
from router.protocol.types import (
    ACK,
    IDS,
    MSG,
    NEW,
    NID,
    NKEY,
    NMSG,
    NSUB,
    NSUBS,
    OK,
    PING,
    PONG,
    SEND,
    SOKS,
    SUB,
    SUBS,
    Command,
    Response,
    Transmission,
)
from router.server import Router
from router.server.edge.block_stream import TransportClosed
from router.server.edge.transports import MemoryBlockTransport, memory_block_pair

# entity id, command (or its raw bytes), signing seed
Request = tuple[bytes, Command | bytes, bytes | None]

SERVICE_VERSION = 19  # SUBS / NSUBS with the count and ids hash
_SERVICE_SIGNED = (NEW, SUB, NSUB)  # signed by the session key too in a service session


@dataclass(frozen=True, slots=True)
class ServiceKeys:
    """What a service session signs with: its session key (the certificate's leaf
    signed it in the hello) and the identity certificate's hash."""

    service_id: bytes
    session_seed: bytes
    cert_hash: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    corr_id: bytes
    entity_id: bytes
    response: Response


@dataclass(frozen=True, slots=True)
class Queue:
    recipient_id: bytes
    sender_id: bytes
    rcv_seed: bytes  # signs the recipient's commands
    box: bytes  # opens the bodies of its MSGs

    def open(self, msg: MSG) -> MessageBody:
        return crypto.decrypt_msg_body(self.box, msg.msg_id, msg.enc_body)


@dataclass(frozen=True, slots=True)
class Notifier:
    notifier_id: bytes
    seed: bytes  # signs NSUB
    srv_ntf_dh_key: bytes
    box: bytes  # opens the metadata of its NMSGs

    def open(self, nmsg: NMSG) -> tuple[bytes, int]:
        """(msgId, ts) of the message an NMSG announces."""
        return crypto.decrypt_ntf_meta(self.box, nmsg.nonce, nmsg.enc_meta)


class Session:
    def __init__(
        self, transport: MemoryBlockTransport, server_hello: ServerHello,
        service: ServiceKeys | None = None, version: int = versions.LEGACY_VERSION,
    ) -> None:
        self.transport = transport
        self.server_hello = server_hello
        self.session_id = server_hello.session_id
        self.version = version  # what its transmissions are encoded and read at
        self.service = service
        self.service_id = None if service is None else service.service_id
        self.events: deque[Reply] = deque()
        self.blocks_received = 0
        self._corr_ids = (n.to_bytes(24, "big") for n in itertools.count(1))
        self._replies: dict[bytes, Reply] = {}
        self._msg_is_event: set[bytes] = set()  # SUB, ACK: a MSG answer is a delivery

    def transmission(
        self, entity_id: bytes, command: Command | bytes, seed: bytes | None
    ) -> bytes:
        corr_id = next(self._corr_ids)
        body = command if isinstance(command, bytes) else encode_command(command, self.version)
        auth, service_sig = b"", None
        if seed is not None:
            signed = authorized_bytes(self.session_id, corr_id, entity_id, body)
            if self.service is not None and isinstance(command, _SERVICE_SIGNED):
                # docs/protocol.md#service-signature: the queue key signs the
                # certificate hash first, the session key the authorized bytes.
                service_sig = crypto.sign(self.service.session_seed, signed)
                signed = self.service.cert_hash + signed
            auth = crypto.sign(seed, signed)
        t = Transmission(auth, corr_id, entity_id, body, service_sig)
        return encode_transmission(t, self.version)

    async def send_block(self, block: bytes) -> None:
        await self.transport.send_block(block)

    async def receive(self) -> list[Reply]:
        """The transmissions of the next block the router writes."""
        block = await self.transport.receive_block()
        self.blocks_received += 1
        return [_reply(raw, self.version) for raw in decode_batch(block)]

    async def commands(
        self, requests: Sequence[Request], *, msg_is_event: bool = True
    ) -> list[Response]:
        """Send the requests in as few blocks as they fit in; their responses in the
        same order. With `msg_is_event`, a MSG answering SUB or ACK goes to `events`
        (as a delivery) and reads as OK here."""
        raws = [self.transmission(*request) for request in requests]
        corr_ids = [decode_transmission(raw, self.version).corr_id for raw in raws]
        for corr_id, (_, command, _) in zip(corr_ids, requests, strict=True):
            if msg_is_event and isinstance(command, SUB | ACK):
                self._msg_is_event.add(corr_id)
        # Read while writing, as a client must: the router stops reading a client
        # whose answers it cannot write.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_blocks, encode_batches(raws))
            return [(await self._reply_to(corr_id)).response for corr_id in corr_ids]

    async def _send_blocks(self, blocks: list[bytes]) -> None:
        for block in blocks:
            await self.send_block(block)

    async def command(
        self, entity_id: bytes, command: Command | bytes, seed: bytes | None = None,
        *, msg_is_event: bool = True,
    ) -> Response:
        return (await self.commands([(entity_id, command, seed)], msg_is_event=msg_is_event))[0]

    async def _sort_next_block(self) -> None:
        for reply in await self.receive():
            if not reply.corr_id:
                self.events.append(reply)
            elif reply.corr_id in self._msg_is_event and isinstance(reply.response, MSG):
                self.events.append(reply)
                self._replies[reply.corr_id] = Reply(reply.corr_id, reply.entity_id, OK())
            else:
                self._replies[reply.corr_id] = reply
            self._msg_is_event.discard(reply.corr_id)

    async def _reply_to(self, corr_id: bytes) -> Reply:
        while corr_id not in self._replies:
            await self._sort_next_block()
        return self._replies.pop(corr_id)

    async def next_message(self, queue: Queue) -> tuple[MSG, MessageBody]:
        """The next pushed MSG, which must be for `queue`, and its opened body."""
        event = await self.next_event()
        assert isinstance(event.response, MSG) and event.entity_id == queue.recipient_id, event
        return event.response, queue.open(event.response)

    async def next_event(self) -> Reply:
        """The next pushed transmission (reading blocks until one comes)."""
        while not self.events:
            await self._sort_next_block()
        return self.events.popleft()

    async def no_more_events(self) -> bool:
        """Whatever the router pushed before answering PING has arrived by then."""
        assert await self.command(b"", PING()) == PONG()
        return not self.events

    async def create_queue(
        self, *, subscribe: bool = False, snd_secure: bool = False,
        basic_auth: bytes | None = None,
    ) -> Queue:
        [queue] = await self.create_queues(
            1, subscribe=subscribe, snd_secure=snd_secure, basic_auth=basic_auth
        )
        return queue

    async def create_queues(
        self, n: int, *, subscribe: bool = False, snd_secure: bool = False,
        basic_auth: bytes | None = None,
    ) -> list[Queue]:
        """`n` queues made with NEW commands packed into as few blocks as they fit in."""
        keys = [(crypto.new_ed25519(), crypto.new_x25519()) for _ in range(n)]
        requests: list[Request] = [
            (b"", NEW(auth_key, dh_key, basic_auth, subscribe, snd_secure), seed)
            for (seed, auth_key), (_, dh_key) in keys
        ]
        queues = []
        for ((seed, _), (dh_priv, _)), ids in zip(keys, await self.commands(requests), strict=True):
            assert isinstance(ids, IDS), ids
            box = crypto.box_key(dh_priv, ids.srv_dh_key)
            queues.append(Queue(ids.rcv_id, ids.snd_id, seed, box))
        return queues

    async def enable_notifications(self, queue: Queue) -> Notifier:
        """NKEY with fresh keys: the queue's notifier."""
        seed, ntf_key = crypto.new_ed25519()
        dh_priv, dh_key = crypto.new_x25519()
        nid = await self.recipient(queue, NKEY(ntf_key, dh_key))
        assert isinstance(nid, NID), nid
        box = crypto.box_key(dh_priv, nid.srv_ntf_dh_key)
        return Notifier(nid.notifier_id, seed, nid.srv_ntf_dh_key, box)

    async def service_command(self, command: SUBS | NSUBS) -> int:
        """SUBS or NSUBS for this connection's service, signed by the session key:
        the count SOKS answers."""
        assert self.service is not None, "connect with a service certificate"
        soks = await self.command(self.service.service_id, command, self.service.session_seed)
        assert isinstance(soks, SOKS), soks
        return soks.count

    async def wait_closed(self) -> None:
        """Read until the router closes the connection."""
        with contextlib.suppress(TransportClosed):
            while True:
                await self.transport.receive_block()

    async def recipient(self, queue: Queue, command: Command) -> Response:
        return await self.command(queue.recipient_id, command, queue.rcv_seed)

    async def send(self, sender_id: bytes, body: bytes, seed: bytes | None = None) -> None:
        await self.expect_ok(sender_id, SEND(b"F", body), seed)

    async def expect_ok(
        self, entity_id: bytes, command: Command, seed: bytes | None = None
    ) -> None:
        response = await self.command(entity_id, command, seed)
        assert response == OK(), response


def raw_block(*transmissions: Transmission) -> bytes:
    packer = BatchPacker()
    for t in transmissions:
        assert packer.add(encode_transmission(t))
    return packer.take_block()


def _reply(raw: bytes, version: int) -> Reply:
    t = decode_transmission(raw, version)
    return Reply(t.corr_id, t.entity_id, decode_response(t.command, version))


@asynccontextmanager
async def connect(
    router: Router, *, version: int = 10, key_hash: bytes | None = None, hello: bool = True,
    service: ServiceCert | None = None, role: bytes = b"M", capacity: int = 4,
) -> AsyncIterator[Session]:
    """A client served by `router.serve_transport`, past the handshake unless `hello`
    is False, acting for the service of the certificate `service` in `role` if
    given (at v19). On leaving, the client end closes and the router's side must end."""
    client, served = memory_block_pair(capacity=capacity)
    if service is not None:
        served.peer_chain = tuple(service.chain)  # what a TLS edge would have verified
        version = SERVICE_VERSION
    async with trio.open_nursery() as nursery:
        nursery.start_soon(router.serve_transport, served)
        server_hello = decode_server_hello(unpad_block(await client.receive_block()))
        key_hash = router.key_hash if key_hash is None else key_hash
        keys = None
        if hello:
            client_service = None
            if service is not None:
                session_key = Ed25519PrivateKey.generate()
                signed = signed_key(ed25519_spki(session_key), service.leaf_key)
                client_service = ClientServiceCert(role, tuple(service.chain), signed)
            client_hello = ClientHello(version, key_hash, client_service=client_service)
            await client.send_block(pad_block(encode_client_hello(client_hello)))
            if service is not None:
                answer = decode_service_handshake_result(
                    unpad_block(await client.receive_block())
                )
                assert answer.service_id is not None, answer
                seed = session_key.private_bytes(
                    serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                    serialization.NoEncryption(),
                )
                cert_hash = hashlib.sha256(service.identity).digest()
                keys = ServiceKeys(answer.service_id, seed, cert_hash)
        try:
            codec_version = versions.LEGACY_VERSION if service is None else SERVICE_VERSION
            yield Session(client, server_hello, keys, codec_version)
        finally:
            await client.aclose()
