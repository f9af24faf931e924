"""wss:// on the router's own listener, with a certificate made for the test."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio
import trustme
from edge_helpers import (
    exchange,
    listener,
    running_router,
    upgrade_request,
    wait_closed_by_router,
)

from router.client import open_client
from router.server import RouterConfig
from router.server.settings.config import ConfigError


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 and its key, and a client context trusting its CA."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return cert, key, client


async def test_a_client_talks_to_the_router_over_wss(certificate):
    cert, key, client_context = certificate
    async with running_router(tls_cert=cert, tls_key=key) as info:
        assert info.url.startswith("wss://")
        with trio.fail_after(10):
            async with open_client(
                info.url, key_hash=info.key_hash, ssl_context=client_context
            ) as client:
                await exchange(client)


async def test_a_plain_client_on_the_tls_listener_is_dropped(certificate):
    cert, key, _ = certificate
    async with running_router(tls_cert=cert, tls_key=key, upgrade_timeout=1.0) as info:
        stream = await trio.open_tcp_stream("127.0.0.1", info.port)
        await stream.send_all(upgrade_request())
        with trio.fail_after(1.0 + 4):
            await wait_closed_by_router(stream)
            await listener(info).wait_connections_at_most(0)


def test_tls_needs_both_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="both"):
        RouterConfig(tls_cert=tmp_path / "cert.pem")
