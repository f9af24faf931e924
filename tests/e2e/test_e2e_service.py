"""The service hello extension: a proven service connects, an unproven one is closed."""

from __future__ import annotations

import trio
import trio_websocket
from e2e_helpers import wait_closed

from router.client import open_client
from router.protocol import crypto
from router.protocol.block import pad_block, unpad_block
from router.protocol.handshake import (
    ClientHello,
    ServiceProof,
    decode_server_hello,
    encode_client_hello,
)
from router.protocol.types import ERR, SERVICE, SOKS, SUBS


async def test_a_client_proving_a_service_connects_and_service_commands_get_an_answer(router):
    seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with open_client(router.address, service_seed=seed) as client:
            assert client.service_id is not None
            resp = await client.command(client.service_id, SUBS(), seed)
            assert resp == SOKS(0)
        async with open_client(router.address) as plain:
            assert await plain.command(b"s" * 24, SUBS(), seed) == ERR(SERVICE)


async def test_a_service_proof_that_does_not_verify_closes_the_connection(router):
    seed, service_key = crypto.new_ed25519()
    _, client_key = crypto.new_x25519()
    with trio.fail_after(10):
        async with trio_websocket.open_websocket_url(router.url) as ws:
            session_id = decode_server_hello(unpad_block(await ws.get_message())).session_id
            # signed for another session
            wrong = crypto.prove_service(seed, b"\x00" * 32, router.key_hash)
            assert session_id != b"\x00" * 32
            proof = ServiceProof(service_key, wrong.signature)
            hello = ClientHello(10, router.key_hash, client_key, proof)
            await ws.send_message(pad_block(encode_client_hello(hello)))
            await wait_closed(ws)
            assert ws.closed is not None
