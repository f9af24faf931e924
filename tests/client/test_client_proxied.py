"""The client sending through a proxy (docs/protocol.md#private-message-routing), against
a scripted peer that plays the proxy and opens layer 1 as the destination would."""

from __future__ import annotations

import os

import pytest
import trio
from smp_fake_peer import PeerConnection, fake_peer

from router.client import (
    BadResponse,
    ProxiedSession,
    ProxyError,
    SMPError,
    open_client,
    parse_address,
)
from router.client._proxied import accept_pkey, forward_request, open_pres, prxy_command
from router.protocol import (
    AUTH,
    ERR,
    OK,
    PFWD,
    PKEY,
    PRES,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    SEND,
    Transmission,
    authorized_bytes,
    crypto,
    decode_command,
    decode_transmission,
    encode_response,
    encode_transmission,
    proxy_error_parts,
    proxying,
    raw_key,
    verify_authorization,
    versions,
)
from router.server.edge.identity import generate_identity

DEST = generate_identity()
DEST_ADDRESS = parse_address(DEST.address("127.0.0.2", 5300))


class Destination:
    """The destination's side of layer 1: its key of the proxy's connection and the
    proxy's session id with it."""

    def __init__(self, identity=DEST, low: int = 8, high: int = 19) -> None:
        key = identity.connection_key()
        self.private = key.private
        self.pkey = PKEY(os.urandom(32), low, high, identity.chain, key.signed_key)

    def open(self, corr_id: bytes, pfwd: PFWD) -> Transmission:
        """The forwarded transmission, as the destination gets it once the proxy's
        layer (a random session secret here) is put on and taken off again."""
        session, rfwd_corr_id = os.urandom(32), os.urandom(24)
        body = proxying.wrap_forward(
            session, rfwd_corr_id, corr_id, pfwd.version, pfwd.client_key, pfwd.enc_transmission
        )
        self.forwarded = proxying.unwrap_forward(session, rfwd_corr_id, body, self.private)
        return decode_transmission(self.forwarded.transmission, pfwd.version)

    def answer(self, t: Transmission, response) -> bytes:
        """The PRES body for `response` to the last opened transmission."""
        f = self.forwarded
        command = encode_response(response, f.version)
        plain = encode_transmission(Transmission(b"", t.corr_id, t.entity_id, command), f.version)
        session, rfwd_corr_id = os.urandom(32), os.urandom(24)
        rres = proxying.encrypt_forwarded_response(f, plain, session, rfwd_corr_id)
        return proxying.unwrap_forward_response(session, rfwd_corr_id, rres)[1]


async def _proxy_script(conn: PeerConnection, dest: Destination, seen: dict, inner_answer) -> None:
    [(t, cmd)] = await conn.receive_commands(1)
    seen["prxy"] = (t, cmd)
    await conn.send([(t.corr_id, b"", dest.pkey)])
    while True:
        [(t, cmd)] = await conn.receive_commands(1)
        assert isinstance(cmd, PFWD)
        seen.setdefault("pfwd", []).append((t, cmd))
        if t.entity_id != dest.pkey.session_id:
            await conn.send([(t.corr_id, t.entity_id, ERR(PROXY_NO_SESSION))])
            continue
        inner = dest.open(t.corr_id, cmd)
        seen.setdefault("inner", []).append(inner)
        enc = dest.answer(inner, inner_answer(inner))
        await conn.send([(t.corr_id, t.entity_id, PRES(enc))])


async def test_a_send_through_the_proxy_reaches_the_destination_signed_and_sealed():
    dest = Destination()
    seen: dict = {}
    seed, sender_key = crypto.new_ed25519()

    async def script(conn: PeerConnection) -> None:
        await _proxy_script(conn, dest, seen, lambda inner: OK())

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            session = await c.open_proxied_session(DEST_ADDRESS.address, basic_auth=b"pw")
            await c.proxied_send(session, b"S" * 24, b"hello", sender_seed=seed, notify=True)
            # the client asked for the destination as its address names it
            t, prxy = seen["prxy"]
            assert (t.entity_id, t.authorization) == (b"", b"")
            assert prxy == PRXY(("127.0.0.2",), "5300", DEST.key_hash, b"pw")
            assert session.session_id == dest.pkey.session_id
            assert session.version == versions.CODEC_VERSION_MAX
    [(t, pfwd)] = seen["pfwd"]
    [inner] = seen["inner"]
    # outer: session id as entity, no authorization, corrId = inner corrId = nonce
    assert (t.entity_id, t.authorization, inner.corr_id) == (session.session_id, b"", t.corr_id)
    assert len(t.corr_id) == 24 and len(pfwd.enc_transmission) == proxying.PROXIED_ENC_SIZE
    assert pfwd.version == session.version
    assert decode_command(inner.command, pfwd.version) == SEND(b"T", b"hello")
    signed = authorized_bytes(session.session_id, inner.corr_id, inner.entity_id, inner.command)
    assert verify_authorization(inner.authorization, sender_key, signed)


async def test_the_destinations_error_is_an_smp_error_and_the_proxys_a_proxy_error():
    dest = Destination()

    async def script(conn: PeerConnection) -> None:
        await _proxy_script(conn, dest, {}, lambda inner: ERR(AUTH))

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            session = await c.open_proxied_session(DEST_ADDRESS)
            with pytest.raises(SMPError) as info:
                await c.proxied_send(session, b"S" * 24, b"x")
            assert info.value.error == AUTH and not isinstance(info.value, ProxyError)
            gone = ProxiedSession(DEST_ADDRESS, b"old session", session.version,
                                  session.destination_key)
            with pytest.raises(ProxyError) as info:
                await c.proxied_send(gone, b"S" * 24, b"x")
            assert info.value.error == PROXY_NO_SESSION
            assert info.value.parts.kind == "NO_SESSION"


async def test_a_refused_prxy_is_a_proxy_error():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, b"", ERR(PROXY_BASIC_AUTH))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ProxyError) as info:
                await c.open_proxied_session(DEST_ADDRESS)
    assert info.value.error == PROXY_BASIC_AUTH


async def test_a_pkey_of_another_router_is_refused_as_an_identity_error():
    impostor = Destination(generate_identity())

    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, b"", impostor.pkey)])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ProxyError) as info:
                await c.open_proxied_session(DEST_ADDRESS)
    parts = proxy_error_parts(info.value.error)
    assert (parts.kind, parts.broker) == ("BROKER", b"TRANSPORT HANDSHAKE IDENTITY")


# --- the pure parts --------------------------------------------------------------------------


def test_accept_pkey_picks_the_highest_common_version_or_refuses():
    dest = Destination(low=8, high=12)
    assert accept_pkey(DEST_ADDRESS, dest.pkey).version == 12
    assert accept_pkey(DEST_ADDRESS, dest.pkey, versions_range=(9, 10)).version == 10
    with pytest.raises(ProxyError) as info:
        accept_pkey(DEST_ADDRESS, Destination(low=20, high=21).pkey)
    assert proxy_error_parts(info.value.error).broker == b"TRANSPORT VERSION"
    key = accept_pkey(DEST_ADDRESS, dest.pkey).destination_key
    assert key == raw_key(crypto.x25519_public(dest.private))


def test_prxy_names_the_address_host_port_and_key_hash():
    assert prxy_command(DEST_ADDRESS) == PRXY(("127.0.0.2",), "5300", DEST.key_hash, None)


def test_open_pres_refuses_an_answer_it_cannot_open_or_for_another_corr_id():
    dest = Destination()
    session = accept_pkey(DEST_ADDRESS, dest.pkey)
    forward = forward_request(session, b"S" * 24, SEND(b"F", b"x"))
    with pytest.raises(BadResponse):
        open_pres(session, forward, b"\x00" * proxying.PROXIED_ENC_SIZE)
    other = forward_request(session, b"S" * 24, SEND(b"F", b"x"))
    inner = dest.open(other.corr_id, other.pfwd)
    enc = dest.answer(inner, OK())
    assert open_pres(session, other, enc) == OK()
    with pytest.raises(BadResponse):
        open_pres(session, forward, enc)  # sealed for the other request
