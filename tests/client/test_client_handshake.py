"""The client's handshake: version choice, hello contents, identity and service proof."""

from __future__ import annotations

import hashlib

import pytest
import trio
from smp_fake_peer import KEY_HASH, PeerConnection, fake_peer

from router.client import HandshakeError, IdentityMismatch, open_client
from router.protocol import (
    KeyType,
    authorized_bytes,
    crypto,
    key_type,
    verify_authorization,
)
from router.protocol.types import PING, PONG


async def answer_pings(conn: PeerConnection) -> None:
    while True:
        for t, _ in await conn.receive_commands(1):
            await conn.send([(t.corr_id, b"", PONG())])


@pytest.mark.parametrize(
    ("router", "client", "expected"),
    [((9, 10), (9, 10), 10), ((9, 9), (9, 10), 9), ((9, 10), (9, 9), 9), ((6, 12), (9, 10), 10)],
)
async def test_the_client_picks_the_highest_common_version(router, client, expected):
    with trio.fail_after(10):
        async with fake_peer(answer_pings, versions=router) as peer:
            async with open_client(peer.address, versions=client) as c:
                await c.ping()
                assert c.version == expected
            assert peer.hellos[0].version == expected


async def test_no_common_version_fails_the_handshake_without_a_client_hello():
    with trio.fail_after(10):
        async with fake_peer(answer_pings, versions=(20, 21)) as peer:
            with pytest.raises(HandshakeError, match="no common version"):
                async with open_client(peer.address):
                    pass  # pragma: no cover - never reached
            await peer.finished.wait()
            assert peer.hellos == [] and peer.closed_before_hello


async def test_the_client_hello_carries_the_key_hash_and_a_fresh_x25519_key():
    with trio.fail_after(10):
        async with fake_peer(answer_pings) as peer:
            async with open_client(peer.address) as c:
                await c.ping()
            async with open_client(peer.url, key_hash=KEY_HASH) as c:
                await c.ping()
    first, second = peer.hellos
    assert first.key_hash == KEY_HASH == second.key_hash
    assert key_type(first.client_key) is KeyType.X25519
    assert first.client_key != second.client_key
    assert first.client_service is None


async def test_signatures_cover_the_session_id_from_the_server_hello():
    seed, spki = crypto.new_ed25519()
    checked = trio.Event()

    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        signed = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
        assert verify_authorization(t.authorization, spki, signed)
        checked.set()
        await conn.send([(t.corr_id, t.entity_id, PONG())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            await c.command(b"entity", PING(), key_seed=seed)
            assert checked.is_set()


async def test_a_certificate_chain_that_matches_the_key_hash_is_accepted():
    identity = b"identity certificate"
    chain = (b"leaf", identity)
    with trio.fail_after(10):
        async with fake_peer(answer_pings, cert_chain=chain, check_key_hash=False) as peer:
            async with open_client(peer.url, key_hash=hashlib.sha256(identity).digest()) as c:
                await c.ping()


async def test_a_certificate_chain_for_another_identity_fails_the_handshake():
    with trio.fail_after(10):
        async with fake_peer(answer_pings, cert_chain=(b"leaf", b"someone else")) as peer:
            with pytest.raises(HandshakeError, match="identity"):
                async with open_client(peer.address):
                    pass  # pragma: no cover - never reached


@pytest.mark.parametrize("chain", [(b"someone else",), (b"leaf", b"someone else")],
                         ids=["one certificate", "leaf and identity"])
async def test_a_wrong_identity_is_identity_mismatch_and_the_client_sends_no_hello(chain):
    with trio.fail_after(10):
        async with fake_peer(answer_pings, cert_chain=chain) as peer:
            with pytest.raises(IdentityMismatch):
                async with open_client(peer.address):
                    pass  # pragma: no cover - never reached
            await peer.finished.wait()
            assert peer.hellos == [] and peer.closed_before_hello
