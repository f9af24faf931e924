"""A router embedded behind a URL path, as a gateway or reverse proxy serves it:
addresses that carry the path, HTTP refusals of the upgrade retried with backoff,
and a wrong key hash reported at connect time."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio
import trio_websocket
from nacl.signing import VerifyKey

from router.client import (
    IdentityMismatch,
    RecipientQueue,
    UpgradeRejected,
    format_address,
    open_client,
)
from router.client.agent import open_agent
from router.client.agent_state import ConnectFailed, QueuesUp, ReceivedMessage
from router.client.backoff import Backoff
from router.client.durable import open_durable_subscriber
from router.protocol import crypto
from router.protocol.block import unpad_block
from router.protocol.handshake import decode_server_hello
from router.server import Router, RouterConfig, handle_websocket, open_router

FAST = Backoff(initial=0.01, maximum=0.1)
SMP_PATH = "/smp"
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


@dataclass
class PathServer:
    """A WebSocket server that hands `/smp` to the router, answers other paths 404,
    and refuses the next upgrades on `/smp` with the statuses in `refuse` (a proxy
    whose router is restarting)."""

    router: Router
    port: int = 0
    refuse: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)

    @property
    def key_hash(self) -> bytes:
        return self.router.key_hash

    def ws_url(self, path: str = SMP_PATH, *, with_key_hash: bool = True) -> str:
        user = base64.urlsafe_b64encode(self.key_hash).decode() + "@" if with_key_hash else ""
        return f"ws://{user}127.0.0.1:{self.port}{path}"

    @property
    def address(self) -> str:
        return format_address(self.key_hash, "127.0.0.1", self.port, SMP_PATH)

    async def handle(self, request: trio_websocket.WebSocketRequest) -> None:
        # Routed by the path alone, as HTTP servers do: the query carries the client's
        # challenge (docs/protocol.md#web-identity-proof).
        if request.path.partition("?")[0] != SMP_PATH:
            await request.reject(404, body=b"no such path")
        elif self.refuse:
            status = self.refuse.pop(0)
            self.refused.append(status)
            await request.reject(status, body=b"router restarting")
        else:
            await handle_websocket(self.router, await request.accept())


@asynccontextmanager
async def path_server(**kwargs) -> AsyncIterator[PathServer]:
    async with open_router(RouterConfig(store="memory")) as router:
        server = PathServer(router, **kwargs)
        async with trio.open_nursery() as nursery:
            ws_server = await nursery.start(partial(
                trio_websocket.serve_websocket, server.handle, "127.0.0.1", 0, None
            ))
            server.port = ws_server.port
            yield server
            nursery.cancel_scope.cancel()


async def secured_queue(url: str) -> tuple[RecipientQueue, bytes]:
    async with open_client(url) as client:
        queue = await client.create_queue()
        seed, key = crypto.new_ed25519()
        await client.secure_queue(queue, key)
    return queue, seed


async def send(url: str, queue: RecipientQueue, seed: bytes, body: bytes) -> None:
    async with open_client(url) as client:
        await client.send(queue.sender_id, body, sender_seed=seed)


async def test_a_client_reaches_the_router_by_ws_url_and_by_smp_address_with_a_path():
    with trio.fail_after(10):
        async with path_server() as server:
            async with open_client(server.ws_url()) as client:
                await client.ping()
            async with open_client(server.address) as client:
                await client.ping()
            async with open_client(server.ws_url(with_key_hash=False), server.key_hash) as c:
                await c.ping()


async def test_a_refused_upgrade_is_its_own_error_carrying_the_status():
    with trio.fail_after(10):
        async with path_server(refuse=[502]) as server:
            with pytest.raises(UpgradeRejected) as refused:
                async with open_client(server.ws_url()):
                    pass  # pragma: no cover - never reached
            assert refused.value.status == 502
            with pytest.raises(UpgradeRejected) as missing:
                async with open_client(server.ws_url("/elsewhere")):
                    pass  # pragma: no cover - never reached
            assert missing.value.status == 404


async def test_a_wrong_key_hash_fails_at_connect_time_with_identity_mismatch():
    with trio.fail_after(10):
        async with path_server() as server:
            wrong = bytes(32)
            with pytest.raises(IdentityMismatch):
                async with open_client(server.ws_url(with_key_hash=False), wrong):
                    pass  # pragma: no cover - never reached


async def test_the_router_hello_carries_its_certificate_chain_and_a_key_it_signed():
    with trio.fail_after(10):
        async with path_server() as server:
            url = server.ws_url(with_key_hash=False)
            async with trio_websocket.open_websocket_url(url) as ws:
                hello = decode_server_hello(unpad_block(await ws.get_message()))
    # The online certificate, then the identity certificate
    # (docs/protocol.md#server-hello-identity).
    online, identity = hello.cert_chain
    assert hashlib.sha256(identity).digest() == server.key_hash
    # signed key = SEQUENCE { X25519 SPKI (44 bytes), Ed25519 algorithm, BIT STRING sig }
    signed = hello.signed_key
    assert signed is not None and signed[:2] == b"\x30\x76"  # 44 + 7 + 67 bytes
    spki, signature = signed[2:46], signed[-64:]
    assert spki.startswith(bytes.fromhex("302a300506032b656e032100"))
    start = online.index(ED25519_SPKI_PREFIX) + len(ED25519_SPKI_PREFIX)
    VerifyKey(online[start:start + 32]).verify(spki, signature)


async def test_the_agent_retries_refused_upgrades_with_backoff_and_then_receives():
    with trio.fail_after(15):
        async with path_server() as server:
            queue, seed = await secured_queue(server.ws_url())
            await send(server.ws_url(), queue, seed, b"after the restart")
            server.refuse[:] = [502, 503, 404]
            failures: list[ConnectFailed] = []
            async with open_agent(backoff=FAST) as agent:
                agent.add_queues(server.ws_url(), [queue])
                async for event in agent.events():
                    if isinstance(event, ConnectFailed):
                        failures.append(event)
                    if isinstance(event, ReceivedMessage):
                        assert event.message.body == b"after the restart"
                        assert await agent.ack(event)
                        break
    assert server.refused == [502, 503, 404]
    assert [f.attempt for f in failures] == [1, 2, 3]
    assert [type(f.error) for f in failures] == [UpgradeRejected] * 3
    assert [f.error.status for f in failures] == [502, 503, 404]


async def test_the_agent_takes_a_plain_ws_url_when_its_connect_supplies_the_key_hash():
    with trio.fail_after(10):
        async with path_server() as server:
            queue, _ = await secured_queue(server.ws_url())
            plain = server.ws_url(with_key_hash=False)
            with pytest.raises(ValueError, match="key hash"):
                async with open_agent(backoff=FAST) as agent:
                    agent.add_queues(plain, [queue])
            connect = partial(open_client, key_hash=server.key_hash)
            async with open_agent(backoff=FAST, connect=connect) as agent:
                agent.add_queues(plain, [queue])
                async for event in agent.events():
                    if isinstance(event, QueuesUp):
                        assert event.recipient_ids == (queue.recipient_id,)
                        break


async def test_the_agent_reports_a_wrong_key_hash_as_identity_mismatch():
    with trio.fail_after(10):
        async with path_server() as server:
            queue, _ = await secured_queue(server.ws_url())
            wrong = format_address(hashlib.sha256(b"another").digest(), "127.0.0.1",
                                   server.port, SMP_PATH)
            async with open_agent(backoff=FAST) as agent:
                agent.add_queues(wrong, [queue])
                async for event in agent.events():
                    if isinstance(event, ConnectFailed):
                        assert isinstance(event.error, IdentityMismatch)
                        assert "identity" in event.reason
                        break


async def test_the_durable_subscriber_rides_out_a_refused_upgrade_at_an_smp_address_with_a_path():
    with trio.fail_after(15):
        async with path_server() as server:
            queue, seed = await secured_queue(server.address)
            await send(server.address, queue, seed, b"durable")
            server.refuse[:] = [503]
            async with open_durable_subscriber(backoff=FAST) as subscriber:
                subscriber.add_queues(server.address, [queue])
                async for message in subscriber:
                    assert message.body == b"durable"
                    break
    assert server.refused == [503]
