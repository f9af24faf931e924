"""Services by TLS client certificate against a served router (docs/protocol.md#client-service):
a service connects and its SUBS is answered; a hello whose chain is not the TLS one is
refused with the third block; a client without a certificate gets ERR SERVICE for SUBS."""

from __future__ import annotations

import pytest
import trio

from bench.service_client import HandshakeRefused, chain_of_two, connect_service
from router.client import ServiceCertificate, open_client
from router.protocol import crypto
from router.protocol.types import ERR, NO_IDS_HASH, SERVICE, SUBS


async def test_a_service_by_certificate_connects_and_its_subs_is_answered(router):
    cert_file, key_file = chain_of_two().files()
    with trio.fail_after(10):
        async with open_client(
            router.address, service_cert=ServiceCertificate(cert_file, key_file)
        ) as client:
            assert client.service_id is not None
            assert await client.subscribe_service(0, NO_IDS_HASH) == 0
        seed, _ = crypto.new_ed25519()
        async with open_client(router.address) as plain:
            assert await plain.command(b"s" * 24, SUBS(0, NO_IDS_HASH), seed) == ERR(SERVICE)


async def test_a_service_chain_other_than_the_tls_one_is_refused(router):
    with trio.fail_after(10):
        with pytest.raises(HandshakeRefused, match="HANDSHAKE BAD_AUTH"):
            await connect_service(
                router.port, router.key_hash, chain_of_two(), hello_chain=chain_of_two().chain
            )
