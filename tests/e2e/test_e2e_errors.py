"""Bad input end to end: the right ERR, and the connection and the router carry on."""

from __future__ import annotations

import random

import pytest
import trio
import trio_websocket
from e2e_helpers import raw_block, raw_connection, wait_closed

from router.client import ConnectionClosed, HandshakeError, open_client
from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, pad_block, unpad_block
from router.protocol.codec import decode_response, encode_command
from router.protocol.transmission import decode_transmission
from router.protocol.types import (
    AUTH,
    BLOCK,
    CMD_HAS_AUTH,
    CMD_NO_AUTH,
    CMD_NO_ENTITY,
    CMD_SYNTAX,
    CMD_UNKNOWN,
    ERR,
    NEW,
    PING,
    PONG,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    SUB,
    Transmission,
)


def ping(corr_id: bytes, authorization: bytes = b"", entity_id: bytes = b"") -> Transmission:
    return Transmission(authorization, corr_id, entity_id, b"PING")


async def test_a_block_that_does_not_parse_gets_one_err_block_and_the_connection_stays(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client, open_client(router.address) as other:
            bad_blocks = [
                pad_block(b"\x00"),  # zero transmissions
                pad_block(b"\x01\x00\x10abc"),  # transmission longer than the block
                pad_block(b"\x01\x00\x01\x00zz"),  # bytes after the last transmission
                b"\xff\xff" + b"#" * (BLOCK_SIZE - 2),  # length beyond the block
            ]
            for block in bad_blocks:
                await client.send_raw_block(block)
                raw = await client.next_raw_transmission()
                assert (raw.corr_id, raw.entity_id, raw.response) == (b"", b"", ERR(BLOCK))
                await client.ping()
            await other.ping()


async def test_unknown_and_malformed_commands_are_answered_with_their_cmd_error(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            cases = [
                (b"", b"HELLO", None, ERR(CMD_UNKNOWN)),
                (b"", b"PING now", None, ERR(CMD_SYNTAX)),
                (q.sender_id, b"SEND", None, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"SUB x", q.rcv_auth_seed, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"ACK ", q.rcv_auth_seed, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"KEY \x03abc", q.rcv_auth_seed, ERR(CMD_SYNTAX)),
            ]
            for entity_id, command, seed, expected in cases:
                assert await client.command(entity_id, command, seed) == expected, command
            await client.ping()


async def test_credential_rules_are_checked_before_any_queue_lookup(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            new_cmd = encode_command_of_new()
            cases = [
                (b"x" * 24, PING(), None, ERR(CMD_HAS_AUTH)),
                (b"", PING(), q.rcv_auth_seed, ERR(CMD_HAS_AUTH)),
                (b"", new_cmd, None, ERR(CMD_NO_AUTH)),
                (q.recipient_id, SUB(), None, ERR(CMD_NO_AUTH)),
                (b"", SUB(), q.rcv_auth_seed, ERR(CMD_NO_AUTH)),
                (b"", b"SEND F hi", None, ERR(CMD_NO_ENTITY)),
            ]
            for entity_id, command, seed, expected in cases:
                assert await client.command(entity_id, command, seed) == expected, command


def encode_command_of_new() -> bytes:
    _, auth_key = crypto.new_ed25519()
    _, dh_key = crypto.new_x25519()
    return encode_command(NEW(auth_key, dh_key, None, False, True))


async def test_errors_echo_the_corr_id_and_come_before_the_blocks_other_responses(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            block = raw_block(
                ping(b"c1"),
                ping(b"c2", authorization=b"x" * 10),  # no such authorization length
                Transmission(b"", b"c3", b"", b"NOPE"),
                ping(b"c4"),
            )
            await client.send_raw_block(block)
            answers = [await client.next_raw_transmission() for _ in range(4)]
            assert [(a.corr_id, a.response) for a in answers] == [
                (b"c2", ERR(BLOCK)),
                (b"c3", ERR(CMD_UNKNOWN)),
                (b"c1", PONG()),
                (b"c4", PONG()),
            ]


async def test_an_80_byte_authenticator_is_auth_since_the_router_sends_no_session_key(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            await client.send_raw_block(raw_block(
                Transmission(b"a" * 80, b"c", q.recipient_id, b"SUB")
            ))
            answer = await client.next_raw_transmission()
            assert (answer.corr_id, answer.entity_id, answer.response) == (
                b"c", q.recipient_id, ERR(AUTH)
            )


async def test_proxy_commands_get_the_answers_of_a_router_that_does_not_proxy(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            assert await client.command(b"", b"PRXY x") == ERR(PROXY_BASIC_AUTH)
            assert await client.command(b"s" * 24, b"PFWD x") == ERR(PROXY_NO_SESSION)


async def test_random_transmissions_only_ever_get_err_responses_and_break_nothing(router):
    rng = random.Random(1234)
    with trio.fail_after(20):
        async with raw_connection(router) as (ws, _), open_client(router.address) as other:
            for round_ in range(50):
                transmissions = [
                    Transmission(
                        rng.choice([b"", rng.randbytes(64)]),
                        b"%d" % round_,
                        rng.choice([b"", rng.randbytes(24)]),
                        rng.choice([b"SUB", b"ACK ", b"SEND ", b"NEW ", b"KEY ", b"X"])
                        + rng.randbytes(rng.randrange(0, 200)),
                    )
                    for _ in range(rng.randrange(1, 20))
                ]
                await ws.send_message(raw_block(*transmissions))
                reply = unpad_block(await ws.get_message())
                count = reply[0]
                assert count == len(transmissions)
                pos = 1
                for _ in range(count):
                    n = int.from_bytes(reply[pos : pos + 2], "big")
                    t = decode_transmission(reply[pos + 2 : pos + 2 + n])
                    assert isinstance(decode_response(t.command), ERR)
                    pos += 2 + n
            await other.ping()


async def test_a_message_that_is_not_one_block_closes_only_that_connection(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client, open_client(router.address) as other:
            await client.send_raw_block(b"\x00" * 100)
            with pytest.raises(ConnectionClosed):
                await client.next_event()
            await other.ping()


async def test_a_text_message_closes_the_connection(router):
    with trio.fail_after(10):
        async with raw_connection(router) as (ws, _):
            await ws.send_message("PING")
            await wait_closed(ws)
            assert ws.closed is not None


@pytest.mark.parametrize("version", [8, 11])
async def test_a_client_hello_with_a_version_outside_9_to_10_is_closed(router, version):
    with trio.fail_after(10):
        async with raw_connection(router, version=version) as (ws, _):
            await wait_closed(ws)
            assert ws.closed is not None


async def test_a_client_hello_naming_another_router_is_closed(router):
    with trio.fail_after(10):
        async with raw_connection(router, key_hash=b"\x00" * 32) as (ws, _):
            await wait_closed(ws)
            assert ws.closed is not None


async def test_a_client_without_a_common_version_gives_up_in_the_handshake(router):
    with trio.fail_after(10), pytest.raises(HandshakeError):
        async with open_client(router.address, versions=(11, 12)):
            pass


async def test_the_server_hello_offers_9_to_10_and_a_fresh_session_id_per_connection(router):
    with trio.fail_after(10):
        async with raw_connection(router) as (_, first), raw_connection(router) as (_, second):
            assert len(first) == 32 and first != second
        async with trio_websocket.open_websocket_url(router.url) as ws:
            hello = unpad_block(await ws.get_message())
            assert hello[:4] == b"\x00\x09\x00\x0a" and hello[4] == 32


async def test_a_client_that_never_sends_its_hello_is_closed_after_the_timeout(router_factory):
    info = await router_factory(handshake_timeout=0.2)
    with trio.fail_after(10):
        async with raw_connection(info, hello=False) as (ws, _):
            await wait_closed(ws)
            assert ws.closed is not None
