"""Services by TLS client certificate, as the reference has them (docs/protocol.md#client-service,
#service-signature, #service-subscriptions): a real router on 127.0.0.1 behind its
native TLS listener, and a client written from the reference's handshake and
encodings (service_tls_client.py)."""

from __future__ import annotations

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.service_client import (
    HandshakeRefused,
    chain_of_two,
    connect_service,
    encode,
    parse_service_answer,
    plain_hello,
    self_signed_cert,
)
from router.protocol import crypto
from router.protocol.ids_hash import queue_ids_hash
from router.protocol.types import IDS, MSG, NEW, NID, NKEY, NMSG, NSUB, OK, SEND, SOK, SUB
from router.server import RouterConfig, open_router
from router.server.edge.listener import serve_edge
from router.server.edge.native_tls import identity_tls_context

NO_HASH = bytes(16)


async def _hold_router(
    config: RouterConfig | None = None, *, task_status=trio.TASK_STATUS_IGNORED
) -> None:
    async with open_router(config or RouterConfig(end_batch_interval=0.02)) as router:
        async with trio.open_nursery() as nursery:
            edge = await nursery.start(
                lambda task_status: serve_edge(
                    router.serve_transport, "127.0.0.1", 0, hook=router.request_hook,
                    limits=router.config.edge_limits(),
                    identity_tls=identity_tls_context(router.identity),
                    task_status=task_status,
                )
            )
            task_status.started((router, edge.port))


@pytest.fixture
async def served(nursery):
    return await nursery.start(_hold_router)


async def _new_queue(session, *, subscribe: bool = False, service: bool = True):
    """NEW (a contact queue: SEND needs no key) with fresh keys; (ids, queue key, box key)."""
    seed, auth_key = crypto.new_ed25519()
    dh_priv, dh_key = crypto.new_x25519()
    queue_key = Ed25519PrivateKey.from_private_bytes(seed)
    reply = await session.command(
        b"", encode(NEW(auth_key, dh_key, None, subscribe, False)), queue_key,
        service_signed=service,
    )
    ids = session.decode(reply)
    assert isinstance(ids, IDS), reply
    return ids, queue_key, crypto.box_key(dh_priv, ids.srv_dh_key)


async def _ordinary(port: int, key_hash: bytes):
    session = await connect_service(port, key_hash, None)
    await plain_hello(session, key_hash)
    return session


async def test_a_service_gets_its_id_again_and_another_certificate_another(served):
    router, port = served
    cert = self_signed_cert()
    first = await connect_service(port, router.key_hash, cert)
    await first.aclose()
    again = await connect_service(port, router.key_hash, cert)
    assert again.service_id == first.service_id and len(first.service_id) == 24
    other = await connect_service(port, router.key_hash, chain_of_two())
    assert other.service_id != first.service_id
    notifier = await connect_service(port, router.key_hash, cert, b"N")
    assert notifier.service_id not in (first.service_id, other.service_id)  # another role
    for session in (again, other, notifier):
        await session.aclose()


async def test_a_chain_other_than_the_tls_one_or_a_bad_key_signature_is_refused(served):
    router, port = served
    cert, other = chain_of_two(), self_signed_cert()
    with pytest.raises(HandshakeRefused, match="HANDSHAKE BAD_AUTH"):
        await connect_service(port, router.key_hash, cert, hello_chain=other.chain)
    with pytest.raises(HandshakeRefused, match="HANDSHAKE BAD_AUTH"):
        await connect_service(port, router.key_hash, cert, bad_key_signature=True)


async def test_service_signatures_are_required_in_a_service_session_and_refused_outside(served):
    router, port = served
    service = await connect_service(port, router.key_hash, self_signed_cert())
    seed, auth_key = crypto.new_ed25519()
    new = encode(NEW(auth_key, crypto.new_x25519()[1], None, False, False))
    queue_key = Ed25519PrivateKey.from_private_bytes(seed)
    unsigned = await service.command(b"", new, queue_key, service_signed=False)
    assert unsigned.command == b"ERR SERVICE"
    forged = await service.command(
        b"", new, queue_key, service_signed=True, service_key=Ed25519PrivateKey.generate()
    )
    assert forged.command == b"ERR SERVICE"
    ordinary = await _ordinary(port, router.key_hash)
    ordinary.session_key = Ed25519PrivateKey.generate()
    ordinary.cert = service.cert  # only to sign: this session proved no service
    refused = await ordinary.command(b"", new, queue_key, service_signed=True)
    assert refused.command == b"ERR SERVICE"
    plain = await ordinary.command(b"", new, queue_key, service_signed=False)
    assert isinstance(ordinary.decode(plain), IDS)
    notifier = await connect_service(port, router.key_hash, self_signed_cert(), b"N")
    prohibited = await notifier.command(b"", new, queue_key, service_signed=True)
    assert prohibited.command == b"ERR CMD PROHIBITED"  # not a notifier's command
    for session in (service, ordinary, notifier):
        await session.aclose()


async def test_subs_delivers_what_came_meanwhile_then_alls_and_a_second_session_displaces(
    served,
):
    router, port = served
    cert = self_signed_cert()
    service = await connect_service(port, router.key_hash, cert)
    queues = [await _new_queue(service) for _ in range(3)]
    for ids, _, _ in queues:
        assert ids.service_id == service.service_id  # NEW in a service session associates
    await service.aclose()
    sender = await _ordinary(port, router.key_hash)
    for n, (ids, _, _) in enumerate(queues):
        reply = await sender.command(ids.snd_id, encode(SEND(b"F", b"message %d" % n)))
        assert sender.decode(reply) == OK()
    rids = [ids.rcv_id for ids, _, _ in queues]
    expected_hash = queue_ids_hash(rids)

    service = await connect_service(port, router.key_hash, cert)
    soks = await service.subs(3, expected_hash)
    assert parse_service_answer(soks.command) == (b"SOKS", 3, expected_hash)
    boxes = {ids.rcv_id: box for ids, _, box in queues}
    bodies = set()
    for _ in range(3):
        event = await service.next_event()
        msg = service.decode(event)
        assert isinstance(msg, MSG) and event.entity_id in boxes
        bodies.add(crypto.decrypt_msg_body(boxes[event.entity_id], msg.msg_id, msg.enc_body).body)
    assert bodies == {b"message 0", b"message 1", b"message 2"}
    alls = await service.next_event()
    assert (alls.entity_id, alls.command) == (b"", b"ALLS")

    second = await connect_service(port, router.key_hash, cert)
    soks = await second.subs(0, NO_HASH)  # the router answers with its own figures
    assert parse_service_answer(soks.command) == (b"SOKS", 3, expected_hash)
    ends = await service.next_event()
    assert ends.entity_id == service.service_id
    assert parse_service_answer(ends.command) == (b"ENDS", 3, expected_hash)
    for session in (service, second, sender):
        await session.aclose()


async def test_an_unsigned_sub_releases_a_queue_and_a_signed_one_takes_it_back(served):
    router, port = served
    cert = self_signed_cert()
    service = await connect_service(port, router.key_hash, cert)
    (ids, queue_key, _), (kept, _, _) = await _new_queue(service), await _new_queue(service)
    ordinary = await _ordinary(port, router.key_hash)
    ordinary.cert = cert
    released = await ordinary.command(ids.rcv_id, encode(SUB()), queue_key)
    assert ordinary.decode(released) == SOK(None)
    soks = await service.subs(2, NO_HASH)
    assert parse_service_answer(soks.command) == (b"SOKS", 1, queue_ids_hash([kept.rcv_id]))
    back = await service.command(ids.rcv_id, encode(SUB()), queue_key, service_signed=True)
    assert service.decode(back) == SOK(service.service_id)
    soks = await service.subs(2, NO_HASH)
    both = queue_ids_hash([ids.rcv_id, kept.rcv_id])
    assert parse_service_answer(soks.command) == (b"SOKS", 2, both)
    for session in (service, ordinary):
        await session.aclose()


async def test_a_block_of_signed_subs_associates_its_queues_in_one_store_write(
    served, monkeypatch
):
    router, port = served
    owner = await _ordinary(port, router.key_hash)
    queues = [await _new_queue(owner, service=False) for _ in range(4)]
    service = await connect_service(port, router.key_hash, self_signed_cert())
    calls = {"set_queues_service": 0, "set_service": 0}
    store_class = type(router.queues)  # slotted: counted on the class, for this test
    for name in calls:
        original = getattr(store_class, name)

        def counted(self, *args, _original=original, _name=name):
            calls[_name] += 1
            return _original(self, *args)

        monkeypatch.setattr(store_class, name, counted)
    answers = await service.block(
        [(ids.rcv_id, encode(SUB()), key) for ids, key, _ in queues], service_signed=True
    )
    assert [service.decode(a) for a in answers] == [SOK(service.service_id)] * 4
    assert calls == {"set_queues_service": 1, "set_service": 0}
    rids = [ids.rcv_id for ids, _, _ in queues]
    soks = await service.subs(4, queue_ids_hash(rids))
    assert parse_service_answer(soks.command) == (b"SOKS", 4, queue_ids_hash(rids))
    for session in (owner, service):
        await session.aclose()


async def test_a_notifier_service_subscribes_with_nsubs_and_gets_nmsg(served):
    router, port = served
    owner = await _ordinary(port, router.key_hash)
    ids, queue_key, _ = await _new_queue(owner, service=False)
    ntf_seed, ntf_key = crypto.new_ed25519()
    reply = await owner.command(
        ids.rcv_id, encode(NKEY(ntf_key, crypto.new_x25519()[1])), queue_key
    )
    nid = owner.decode(reply)
    assert isinstance(nid, NID)
    notifier_key = Ed25519PrivateKey.from_private_bytes(ntf_seed)
    cert = self_signed_cert()
    notifier = await connect_service(port, router.key_hash, cert, b"N")
    sub = await notifier.command(nid.notifier_id, encode(NSUB()), notifier_key,
                                 service_signed=True)
    assert notifier.decode(sub) == SOK(notifier.service_id)
    await notifier.aclose()

    notifier = await connect_service(port, router.key_hash, cert, b"N")
    nsubs = await notifier.subs(1, queue_ids_hash([nid.notifier_id]), tag=b"NSUBS")
    assert parse_service_answer(nsubs.command) == (
        b"SOKS", 1, queue_ids_hash([nid.notifier_id])
    )
    sender = await _ordinary(port, router.key_hash)
    assert sender.decode(await sender.command(ids.snd_id, encode(SEND(b"T", b"hi")))) == OK()
    with trio.fail_after(10):
        event = await notifier.next_event()
    assert event.entity_id == nid.notifier_id
    assert isinstance(notifier.decode(event), NMSG)
    for session in (owner, notifier, sender):
        await session.aclose()


async def test_a_client_without_a_certificate_works_as_before(served):
    router, port = served
    client = await _ordinary(port, router.key_hash)
    ids, queue_key, box = await _new_queue(client, subscribe=True, service=False)
    assert ids.service_id is None
    assert client.decode(await client.command(ids.snd_id, encode(SEND(b"F", b"x")))) == OK()
    event = await client.next_event()
    msg = client.decode(event)
    assert isinstance(msg, MSG)
    assert crypto.decrypt_msg_body(box, msg.msg_id, msg.enc_body).body == b"x"
    client.service_id = bytes(24)  # a session that proved no service names one anyway
    subs = await client.subs(0, NO_HASH)  # the reference's ERR SERVICE
    assert subs.command == b"ERR SERVICE"
    await client.aclose()


@pytest.mark.parametrize("store", ["memory", "journal", "sqlite"])
async def test_services_and_their_queues_are_kept_across_a_restart(store, tmp_path):
    """The memory store through its snapshot (a clean stop), the others as they write."""
    config = RouterConfig(end_batch_interval=0.02, store=store, data_dir=tmp_path / "data")
    cert = self_signed_cert()
    async with trio.open_nursery() as nursery:
        router, port = await nursery.start(_hold_router, config)
        service = await connect_service(port, router.key_hash, cert)
        queues = [await _new_queue(service) for _ in range(2)]
        service_id = service.service_id
        await service.aclose()
        nursery.cancel_scope.cancel()
    rids = [ids.rcv_id for ids, _, _ in queues]
    async with trio.open_nursery() as nursery:
        router, port = await nursery.start(_hold_router, config)
        service = await connect_service(port, router.key_hash, cert)
        assert service.service_id == service_id
        soks = await service.subs(2, queue_ids_hash(rids))
        assert parse_service_answer(soks.command) == (b"SOKS", 2, queue_ids_hash(rids))
        alls = await service.next_event()
        assert alls.command == b"ALLS"
        await service.aclose()
        nursery.cancel_scope.cancel()
