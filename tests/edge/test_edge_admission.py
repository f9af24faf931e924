"""Admission under connection-holding attacks: a handful of addresses that open
connections and then stay silent, trickle bytes, upgrade and never send a hello, or
start TLS and never finish, cannot lock other addresses out.

Each attack runs against the real router on 127.0.0.1 with its pool made small by
configuration, so a few dozen sockets fill it. The attackers connect from
127.0.0.2.. (each a distinct client address), keep their connections topped up for
as long as the fresh clients are probed, and the fresh clients (from 127.0.0.1)
must get PONG at least 90% of the time.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trustme
from edge_helpers import connect_raw, listener, running_router, upgrade_request

from router.client import open_client
from router.server import RouterInfo

POOL = 32  # max_pending for these tests: the default's 1024, made small
PER_ADDRESS = 8  # max_pending_per_address: four addresses could fill the pool
ATTACKERS = [f"127.0.0.{2 + i}" for i in range(6)]  # 6 x 8 = 48 > POOL
PROBES = 30
PROBE_TIMEOUT = 5.0  # seconds one fresh client has to get its PONG
REQUIRED = 0.9  # the share of fresh clients that must get PONG

Holder = Callable[[RouterInfo, str], Awaitable[None]]


async def _hold_silent(info: RouterInfo, source: str) -> None:
    stream = await connect_raw(info, source)
    async with stream:
        await _wait_closed(stream)


async def _hold_trickle(info: RouterInfo, source: str) -> None:
    stream = await connect_raw(info, source)
    async with stream:
        request = upgrade_request()
        for byte in request[:-4]:  # never complete
            try:
                await stream.send_all(bytes([byte]))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            await trio.sleep(0.5)


async def _hold_upgraded_without_hello(info: RouterInfo, source: str) -> None:
    stream = await connect_raw(info, source)
    async with stream:
        await stream.send_all(upgrade_request())
        await _wait_closed(stream)  # the router's hello is read and dropped


async def _wait_closed(stream: trio.SocketStream) -> None:
    while True:
        try:
            if not await stream.receive_some(65536):
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def _attacker(info: RouterInfo, source: str, hold: Holder, connections: int) -> None:
    """Keep `connections` held from `source`: one that the router ends is opened again."""

    async def one() -> None:
        while True:
            try:
                await hold(info, source)
            except OSError:
                pass
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(one)


async def _fresh_clients_served(info: RouterInfo, ssl_context: ssl.SSLContext | None = None
                                ) -> int:
    """How many of PROBES fresh clients got PONG within PROBE_TIMEOUT."""
    served = 0
    for _ in range(PROBES):
        with trio.move_on_after(PROBE_TIMEOUT):
            try:
                target = (info.url, info.key_hash) if ssl_context else (info.address, None)
                async with open_client(*target, ssl_context=ssl_context) as client:
                    await client.ping()
                    served += 1
            except Exception:  # refused, closed, timed out: not served
                pass
    return served


async def _under_attack(info: RouterInfo, hold: Holder, *, pending_at_least: int,
                        ssl_context: ssl.SSLContext | None = None) -> int:
    edge = listener(info)
    async with trio.open_nursery() as nursery:
        for source in ATTACKERS:
            nursery.start_soon(_attacker, info, source, hold, PER_ADDRESS)
        with trio.fail_after(10):  # the attack is in place before the fresh clients come
            while edge.pending < pending_at_least:
                await trio.sleep(0.02)
        served = await _fresh_clients_served(info, ssl_context)
        held = edge.pending
        nursery.cancel_scope.cancel()
    # The attack held the pool to the end: the fresh clients got in by the fair drop.
    assert held >= pending_at_least, f"the attackers held only {held} pending connections"
    return served


ATTACKS = {
    "silent": _hold_silent,
    "trickle": _hold_trickle,
    "no-hello": _hold_upgraded_without_hello,
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_fresh_clients_are_served_while_a_few_addresses_hold_pending_connections(attack):
    async with running_router(max_pending=POOL, max_pending_per_address=PER_ADDRESS) as info:
        served = await _under_attack(info, ATTACKS[attack], pending_at_least=POOL * 3 // 4)
    assert served >= REQUIRED * PROBES, f"{attack}: fresh clients got PONG {served} of {PROBES}"


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return cert, key, client


async def _hold_tls_half_open(info: RouterInfo, source: str) -> None:
    """TCP connected, the first bytes of a TLS ClientHello sent, the rest never."""
    stream = await connect_raw(info, source)
    async with stream:
        await stream.send_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        await _wait_closed(stream)


async def test_fresh_tls_clients_are_served_while_a_few_addresses_hold_half_open_handshakes(
    certificate,
):
    cert, key, client_context = certificate
    async with running_router(max_pending=POOL, max_pending_per_address=PER_ADDRESS,
                              tls_cert=cert, tls_key=key) as info:
        served = await _under_attack(info, _hold_tls_half_open,
                                     pending_at_least=POOL * 3 // 4, ssl_context=client_context)
    assert served >= REQUIRED * PROBES, f"wss: fresh clients got PONG {served} of {PROBES}"
