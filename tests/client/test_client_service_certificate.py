"""The client acting for a service by its TLS client certificate (docs/protocol.md#client-service):
the router's service id, NEW in the session associated, and SUBS with the client's own
figures answered with the router's."""

from __future__ import annotations

import pytest
import trio
from loopback_router import running_router

from bench.service_client import chain_of_two
from router.client import ServiceCertificate, open_client
from router.protocol.ids_hash import queue_ids_hash
from router.protocol.types import NO_IDS_HASH


def _certificate(role: bytes = b"M") -> ServiceCertificate:
    cert_file, key_file = chain_of_two().files()
    return ServiceCertificate(cert_file, key_file, role)


async def test_a_service_client_keeps_its_id_and_subscribes_its_queues_with_subs():
    cert = _certificate()
    with trio.fail_after(30):
        async with running_router() as info:
            async with open_client(info.address, service_cert=cert) as service:
                service_id = service.service_id
                assert service_id is not None and len(service_id) == 24
                queues = [await service.create_queue(snd_secure=False) for _ in range(2)]
            async with open_client(info.address) as sender:
                for q in queues:
                    await sender.send(q.sender_id, b"while away")
            rids = [q.recipient_id for q in queues]
            async with open_client(info.address, service_cert=cert) as service:
                assert service.service_id == service_id
                for q in queues:
                    service.add_queue(q)
                assert await service.subscribe_service(2, queue_ids_hash(rids)) == 2
                assert service.service_figures == (2, queue_ids_hash(rids))
                bodies = {(await service.next_event()).body for _ in queues}
                assert bodies == {b"while away"}


async def test_a_notifier_service_sends_nsubs_signed_by_its_session_key():
    # The router answers SOKS only to NSUBS for this session's service id signed by the
    # session key the certificate signed (docs/protocol.md#service-errors).
    with trio.fail_after(30):
        async with running_router() as info:
            async with open_client(info.address, service_cert=_certificate(b"N")) as notifier:
                assert await notifier.subscribe_service_notifications(0, NO_IDS_HASH) == 0
                assert notifier.service_figures == (0, NO_IDS_HASH)


async def test_a_service_certificate_over_websocket_is_refused():
    with trio.fail_after(30):
        async with running_router() as info:
            with pytest.raises(ValueError, match="smp://"):
                async with open_client(info.url, info.key_hash, service_cert=_certificate()):
                    pass
