"""Bad input at the router: the right ERR, and the connection and the router carry on."""

from __future__ import annotations

import random

import pytest
import trio
from smp_session import connect, raw_block
from worker_count import test_workers

from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, pad_block
from router.protocol.codec import encode_command
from router.protocol.keys import x25519_spki
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
    OK,
    PFWD,
    PING,
    PONG,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    SEND,
    SUB,
    Transmission,
    store_error,
)
from store.interfaces import StoreError


def ping(corr_id: bytes, authorization: bytes = b"", entity_id: bytes = b"") -> Transmission:
    return Transmission(authorization, corr_id, entity_id, b"PING")


async def test_a_block_that_does_not_parse_gets_one_err_block_and_the_connection_stays(router):
    with trio.fail_after(10):
        async with connect(router) as client, connect(router) as other:
            bad_blocks = [
                pad_block(b"\x00"),  # zero transmissions
                pad_block(b"\x01\x00\x10abc"),  # transmission longer than the block
                pad_block(b"\x01\x00\x01\x00zz"),  # bytes after the last transmission
                b"\xff\xff" + b"#" * (BLOCK_SIZE - 2),  # length beyond the block
            ]
            for block in bad_blocks:
                await client.send_block(block)
                [reply] = await client.receive()
                assert (reply.corr_id, reply.entity_id, reply.response) == (b"", b"", ERR(BLOCK))
                assert await client.command(b"", PING()) == PONG()
            assert await other.command(b"", PING()) == PONG()


async def test_unknown_and_malformed_commands_are_answered_with_their_cmd_error(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            cases = [
                (b"", b"HELLO", None, ERR(CMD_UNKNOWN)),
                (b"", b"PING now", None, ERR(CMD_SYNTAX)),
                (q.sender_id, b"SEND", None, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"SUB x", q.rcv_seed, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"ACK ", q.rcv_seed, ERR(CMD_SYNTAX)),
                (q.recipient_id, b"KEY \x03abc", q.rcv_seed, ERR(CMD_SYNTAX)),
            ]
            for entity_id, command, seed, expected in cases:
                assert await client.command(entity_id, command, seed) == expected, command
            assert await client.command(b"", PING()) == PONG()


async def test_credential_rules_are_checked_before_any_queue_lookup(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            _, auth_key = crypto.new_ed25519()
            _, dh_key = crypto.new_x25519()
            new_cmd = encode_command(NEW(auth_key, dh_key, None, False, True))
            cases = [
                (b"x" * 24, PING(), None, ERR(CMD_HAS_AUTH)),
                (b"", PING(), q.rcv_seed, ERR(CMD_HAS_AUTH)),
                (b"", new_cmd, None, ERR(CMD_NO_AUTH)),
                (q.recipient_id, SUB(), None, ERR(CMD_NO_AUTH)),
                (b"", SUB(), q.rcv_seed, ERR(CMD_NO_AUTH)),
                (b"", b"SEND F hi", None, ERR(CMD_NO_ENTITY)),
            ]
            for entity_id, command, seed, expected in cases:
                assert await client.command(entity_id, command, seed) == expected, command


async def test_errors_echo_the_corr_id_and_come_before_the_blocks_other_responses(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            await client.send_block(raw_block(
                ping(b"c1"),
                ping(b"c2", authorization=b"x" * 10),  # no such authorization length
                Transmission(b"", b"c3", b"", b"NOPE"),
                ping(b"c4"),
            ))
            answers = []
            while len(answers) < 4:
                answers += await client.receive()
            assert [(a.corr_id, a.response) for a in answers] == [
                (b"c2", ERR(BLOCK)),
                (b"c3", ERR(CMD_UNKNOWN)),
                (b"c1", PONG()),
                (b"c4", PONG()),
            ]


@pytest.mark.one_process("the queue store of one worker's router is made to fail")
async def test_a_failed_queue_lookup_is_answered_err_store_to_the_commands_corr_id(
    router, monkeypatch
):
    """The database away (PostgreSQL restarting): a command whose queue cannot be read
    gets the store's ERR to its own corrId, or its client would wait for an answer
    forever; once the store answers again, so does the router."""
    unavailable = store_error("database unavailable")

    async def fail(*args: object) -> None:
        raise StoreError(unavailable, "the database is away (test)")

    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            with monkeypatch.context() as patched:
                store = type(router.queues)  # its instances may take no attributes
                patched.setattr(store, "get_queue", fail)
                patched.setattr(store, "get_queues", fail)
                assert await client.command(q.sender_id, SEND(b"F", b"hello"), None) == (
                    ERR(unavailable))
            assert await client.command(q.sender_id, SEND(b"F", b"hello"), None) == OK()


async def test_an_80_byte_authenticator_is_auth_since_the_router_sends_no_session_key(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send_block(raw_block(
                Transmission(b"a" * 80, b"c", q.recipient_id, b"SUB")
            ))
            [answer] = await client.receive()
            assert (answer.corr_id, answer.entity_id, answer.response) == (
                b"c", q.recipient_id, ERR(AUTH)
            )


async def test_proxy_commands_get_the_answers_of_a_router_that_does_not_proxy(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            prxy = encode_command(PRXY(("127.0.0.1",), "5223", b"k" * 32))
            assert await client.command(b"", prxy) == ERR(PROXY_BASIC_AUTH)
            pfwd = encode_command(PFWD(10, x25519_spki(b"\x09" * 32), b"e" * 16242))
            assert await client.command(b"s" * 24, pfwd) == ERR(PROXY_NO_SESSION)
            assert await client.command(b"", b"PRXY x") == ERR(CMD_SYNTAX)


async def test_random_transmissions_only_ever_get_err_responses_and_break_nothing(router):
    rng = random.Random(1234)
    with trio.fail_after(20):
        async with connect(router) as client, connect(router) as other:
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
                await client.send_block(raw_block(*transmissions))
                replies = await client.receive()
                while test_workers() > 1 and len(replies) < len(transmissions):
                    replies += await client.receive()  # each owner's part answers apart
                assert len(replies) == len(transmissions)
                assert all(isinstance(r.response, ERR) for r in replies)
            assert await other.command(b"", PING()) == PONG()


@pytest.mark.parametrize("version", [8, 20])
async def test_a_client_hello_with_a_version_outside_9_to_19_is_closed(router, version):
    with trio.fail_after(10):
        async with connect(router, version=version) as client:
            await client.wait_closed()


async def test_a_client_hello_naming_another_router_is_closed(router):
    with trio.fail_after(10):
        async with connect(router, key_hash=b"\x00" * 32) as client:
            await client.wait_closed()


async def test_the_server_hello_offers_9_to_19_and_a_fresh_session_id_per_connection(router):
    with trio.fail_after(10):
        async with connect(router) as first, connect(router) as second:
            hellos = (first.server_hello, second.server_hello)
            assert {(h.min_version, h.max_version) for h in hellos} == {(9, 19)}
            assert len(first.session_id) == 32 and first.session_id != second.session_id


async def test_a_client_that_never_sends_its_hello_is_closed_after_the_timeout(router_factory):
    router = await router_factory(handshake_timeout=0.2)
    with trio.fail_after(10):
        async with connect(router, hello=False) as client:
            await client.wait_closed()
