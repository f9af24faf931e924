"""What the client puts on the wire for each command, and what it makes of the answers."""

from __future__ import annotations

import os

import pytest
import trio
from smp_fake_peer import PeerConnection, fake_peer, fake_queue

from router.client import BadResponse, SMPError, open_client
from router.protocol import authorized_bytes, crypto, verify_authorization, x25519_spki
from router.protocol.types import (
    DEL,
    ERR,
    IDS,
    INFO,
    KEY,
    NDEL,
    NEW,
    NID,
    NSUB,
    OFF,
    OK,
    QUE,
    QUOTA,
    SEND,
    SKEY,
    Response,
)


def signed_by(conn: PeerConnection, t, spki: bytes) -> bool:
    data = authorized_bytes(conn.session_id, t.corr_id, t.entity_id, t.command)
    return verify_authorization(t.authorization, spki, data)


async def test_create_queue_sends_a_signed_new_and_derives_the_box_key():
    srv_priv, srv_dh = crypto.new_x25519()
    seen = {}

    async def script(conn: PeerConnection) -> None:
        [(t, cmd)] = await conn.receive_commands(1)
        assert isinstance(cmd, NEW) and t.entity_id == b""
        assert signed_by(conn, t, cmd.rcv_auth_key)
        seen["new"] = cmd
        seen["router_box"] = crypto.box_key(srv_priv, cmd.rcv_dh_key)
        await conn.send([(t.corr_id, b"", IDS(b"r" * 24, b"s" * 24, srv_dh, cmd.snd_secure))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            q = await c.create_queue(subscribe=True, snd_secure=False, basic_auth=b"pw")
    new = seen["new"]
    assert (new.subscribe, new.snd_secure, new.basic_auth) == (True, False, b"pw")
    assert (q.recipient_id, q.sender_id, q.srv_dh_key, q.snd_secure) == (
        b"r" * 24, b"s" * 24, srv_dh, False,
    )
    assert q.rcv_auth_key == new.rcv_auth_key
    assert q.box_key == seen["router_box"]


async def test_recipient_commands_are_signed_with_the_queue_key_and_addressed_to_it():
    q = fake_queue()
    sender_seed, sender_key = crypto.new_ed25519()
    kinds = []

    async def script(conn: PeerConnection) -> None:
        while True:
            for t, cmd in await conn.receive_commands(1):
                assert t.entity_id == q.recipient_id and signed_by(conn, t, q.rcv_auth_key)
                kinds.append(type(cmd).__name__)
                answer: Response = INFO('{"qiSize": 0}') if isinstance(cmd, QUE) else OK()
                await conn.send([(t.corr_id, t.entity_id, answer)])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            await c.secure_queue(q, sender_key)
            await c.suspend(q)
            assert await c.info(q) == {"qiSize": 0}
            await c.disable_notifications(q)
            await c.delete(q)
    assert kinds == [KEY.__name__, OFF.__name__, QUE.__name__, NDEL.__name__, DEL.__name__]


async def test_sender_commands_are_signed_with_the_sender_key_when_given():
    sender_seed, sender_key = crypto.new_ed25519()
    seen = []

    async def script(conn: PeerConnection) -> None:
        while True:
            for t, cmd in await conn.receive_commands(1):
                seen.append((cmd, t.entity_id, signed_by(conn, t, sender_key), t.authorization))
                await conn.send([(t.corr_id, t.entity_id, OK())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            await c.send(b"sid", b"unsigned")
            await c.secure_sender(b"sid", sender_seed, sender_key)
            await c.send(b"sid", b"signed", sender_seed=sender_seed, notify=True)
    (send1, e1, _, auth1), (skey, e2, ok2, _), (send2, e3, ok3, _) = seen
    assert send1 == SEND(b"F", b"unsigned") and auth1 == b"" and e1 == b"sid"
    assert skey == SKEY(sender_key) and ok2 and e2 == b"sid"
    assert send2 == SEND(b"T", b"signed") and ok3 and e3 == b"sid"


async def test_enable_notifications_sets_up_keys_that_open_the_router_s_nmsg_metadata():
    q = fake_queue()
    srv_priv, srv_dh = crypto.new_x25519()
    seen = {}

    async def script(conn: PeerConnection) -> None:
        [(t, cmd)] = await conn.receive_commands(1)
        assert signed_by(conn, t, q.rcv_auth_key)
        seen["ntf_box"] = crypto.box_key(srv_priv, cmd.rcv_ntf_dh_key)
        seen["notifier_key"] = cmd.notifier_key
        await conn.send([(t.corr_id, t.entity_id, NID(b"n" * 24, srv_dh))])
        [(t, cmd)] = await conn.receive_commands(1)
        assert isinstance(cmd, NSUB) and t.entity_id == b"n" * 24
        assert signed_by(conn, t, seen["notifier_key"])
        await conn.send([(t.corr_id, t.entity_id, OK())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            creds = await c.enable_notifications(q)
            await c.subscribe_notifications(creds)
    assert creds.notifier_id == b"n" * 24 and creds.recipient_id == q.recipient_id
    assert creds.notifier_key == seen["notifier_key"]
    assert creds.ntf_box_key == seen["ntf_box"]


async def test_service_subscriptions_need_a_service_certificate():
    async def script(conn: PeerConnection) -> None:
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(ValueError):
                await c.subscribe_service()


async def test_info_that_is_not_json_is_a_bad_response():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, t.entity_id, INFO("not json"))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(BadResponse):
                await c.info(fake_queue())


async def test_an_unusable_router_dh_key_in_ids_is_a_bad_response_not_a_crash():
    async def script(conn: PeerConnection) -> None:
        [(t, cmd)] = await conn.receive_commands(1)
        low_order = x25519_spki(bytes(32))
        await conn.send([(t.corr_id, b"", IDS(os.urandom(24), os.urandom(24), low_order, True))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(BadResponse):
                await c.create_queue()


async def test_smp_error_carries_the_error_type_and_names_it():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, t.entity_id, ERR(QUOTA))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(SMPError, match="QUOTA") as e:
                await c.send(b"sid", b"too many")
    assert e.value.error == QUOTA
