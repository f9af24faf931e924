"""Changing a running router: what `Router.reconfigure` takes live (limits, passwords,
the information, the TLS certificate), what it leaves for a restart, and the clients
it keeps meanwhile."""

from __future__ import annotations

import dataclasses
import ssl

import pytest
import trio
import trustme

from router.client import SMPError, open_client
from router.server import ConfigError


async def test_limits_and_passwords_change_live_and_the_rest_is_named(start_router):
    info = await start_router(quota=5, password=b"old")
    router = info.router
    with trio.fail_after(20):
        async with open_client(info.address) as kept:
            q = await kept.create_queue(basic_auth=b"old")
            new = dataclasses.replace(router.config, quota=1, password=b"new", port=1,
                                      new_queue_rate=2.0, delivery="per-queue-task")
            live, restart = router.reconfigure(new)
            assert sorted(live) == ["new_queue_rate", "password", "quota"]
            assert sorted(restart) == ["delivery", "port"]
            assert router.config.quota == 1 and router.config.port == info.router.config.port
            assert router.config.delivery == "single-task"
            await kept.send(q.sender_id, b"one")  # the client connected before is kept
            with pytest.raises(SMPError, match="QUOTA"):
                await kept.send(q.sender_id, b"two")
            with pytest.raises(SMPError, match="AUTH"):
                await kept.create_queue(basic_auth=b"old")
            await kept.create_queue(basic_auth=b"new")


@pytest.fixture
def certificates(tmp_path):
    directory = tmp_path
    ca = trustme.CA()
    paths = []
    for n in range(2):
        leaf = ca.issue_cert("127.0.0.1")
        cert, key = directory / f"cert{n}.pem", directory / f"key{n}.pem"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        paths.append((cert, key, leaf))
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return paths, client_context


async def served_certificate(port: int, context: ssl.SSLContext) -> bytes:
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
    async with stream:
        await stream.do_handshake()
        return stream.getpeercert(binary_form=True)


async def test_a_new_tls_certificate_is_served_to_the_next_handshakes(start_router,
                                                                     certificates):
    (cert0, key0, leaf0), (cert1, key1, leaf1) = certificates[0]
    context = certificates[1]
    info = await start_router(tls_cert=cert0, tls_key=key0)
    first_der = ssl.PEM_cert_to_DER_cert(leaf0.cert_chain_pems[0].bytes().decode())
    second_der = ssl.PEM_cert_to_DER_cert(leaf1.cert_chain_pems[0].bytes().decode())
    with trio.fail_after(20):
        assert await served_certificate(info.port, context) == first_der
        # A wss:// client: the certificate reloaded is the web one (an smp:// client
        # is shown the router's identity chain, reloaded or not).
        async with open_client(info.url, info.key_hash, ssl_context=context) as kept:
            live, restart = info.router.reconfigure(
                dataclasses.replace(info.router.config, tls_cert=cert1, tls_key=key1))
            assert live == ["tls_cert", "tls_key"] and restart == []
            assert await served_certificate(info.port, context) == second_der
            await kept.ping()  # the connection made with the old certificate goes on
            async with open_client(info.address) as native:  # still the identity chain
                await native.ping()
        # The same paths with new contents (a renewal) are loaded again too.
        cert1.write_bytes(cert0.read_bytes())
        key1.write_bytes(key0.read_bytes())
        live, _ = info.router.reconfigure(info.router.config)
        assert live == ["tls_cert"]
        assert await served_certificate(info.port, context) == first_der


async def test_a_certificate_that_cannot_be_used_changes_nothing(start_router, certificates,
                                                                 tmp_path):
    (cert0, key0, _), (_, key1, _) = certificates[0]
    info = await start_router(tls_cert=cert0, tls_key=key0, quota=3)
    before = info.router.config
    with pytest.raises(ConfigError, match="is not the key of the certificate"):
        info.router.reconfigure(dataclasses.replace(before, tls_key=key1, quota=9))
    with pytest.raises(ConfigError, match="cannot read the TLS certificate"):
        info.router.reconfigure(dataclasses.replace(before, tls_cert=tmp_path / "gone.pem"))
    assert info.router.config is before
