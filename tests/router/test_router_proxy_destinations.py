"""Destinations the proxy refuses unless allowed (router/server/core/proxy_destinations.py):
loopback, private, link-local, not unicast and this machine's addresses, a name checked
by what it resolves to; and against the real router, `PROXY BROKER HOST` without a
connection, counted, while an allow-list lets an operator proxy inside their network."""

from __future__ import annotations

import ipaddress
import socket
import threading

import loopback_router
import pytest
import trio
from proxied import broker_error, open_session, prxy_for

from router.client import open_client
from router.protocol.types import PKEY, PRXY
from router.server.core.proxy_destinations import (
    DestinationPolicy,
    DestinationRefused,
    is_this_machine,
)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def nowhere(_: object) -> bool:
    return False


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("100.64.0.1", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("0.0.0.0", "not a unicast"), ("::", "not a unicast"), ("224.0.0.1", "not a unicast"),
    ("255.255.255.255", "not a unicast"), ("240.0.0.1", "not a unicast"),
    # IPv6 addresses that carry an IPv4 one inside are judged by it
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("2002:7f00:1::1", "loopback"), ("64:ff9b::a00:1", "private"),
])
def test_addresses_inside_are_refused(address: str, why: str) -> None:
    refusal = DestinationPolicy(local=nowhere).refusal(ip(address))
    assert refusal is not None and why in refusal


def test_public_addresses_pass_and_this_machines_are_refused() -> None:
    policy = DestinationPolicy(local=lambda a: a == ip("198.51.100.7") or a == ip("8.8.4.4"))
    assert policy.refusal(ip("8.8.8.8")) is None
    assert policy.refusal(ip("2606:4700::1111")) is None
    assert "this router's machine" in (policy.refusal(ip("8.8.4.4")) or "")


def test_this_machine_is_what_a_socket_may_bind_to() -> None:
    assert is_this_machine(ip("127.0.0.1"))
    assert not is_this_machine(ip("192.0.2.1"))  # TEST-NET-1: nobody's


def test_an_allow_list_lets_its_networks_through_and_no_others() -> None:
    policy = DestinationPolicy(("10.0.0.0/8", "127.0.0.1", "fd00::/8"), local=nowhere)
    assert policy.refusal(ip("10.200.0.1")) is None
    assert policy.refusal(ip("127.0.0.1")) is None
    assert policy.refusal(ip("fd12::1")) is None
    assert policy.refusal(ip("127.0.0.2")) is not None
    assert policy.refusal(ip("192.168.0.1")) is not None
    with pytest.raises(ValueError, match="'intranet' is not an IP network"):
        DestinationPolicy(("intranet",))


async def test_a_name_is_checked_by_every_address_it_resolves_to() -> None:
    with pytest.raises(DestinationRefused, match=r"localhost \(127\.0\.0\.1\) is a loopback"):
        await DestinationPolicy().resolve("localhost", 5223)
    # allowed, the address connected to is the one checked, not the name again
    assert await DestinationPolicy(("127.0.0.0/8", "::1")).resolve("localhost", 5223) in (
        "127.0.0.1", "::1")
    DestinationPolicy().check_literal("smp.example.net")  # a name waits for resolve
    with pytest.raises(DestinationRefused):
        DestinationPolicy().check_literal("169.254.169.254")


async def test_the_router_refuses_inside_destinations_by_default_without_connecting() -> None:
    async with loopback_router.running_router(allow_proxy=True) as a, \
            loopback_router.running_router() as b, open_client(a.address) as sender:
        for host in ("127.0.0.1", "localhost", "10.0.0.1", "[::1]"):
            prxy = PRXY((host,), str(b.port), b.key_hash, None)
            assert broker_error(await sender.command(b"", prxy)) == b"HOST", host
        assert b.router.statistics().connections_total == 0
        assert a.router.relays.stats.refused_destinations == 4
        s = a.router.statistics()
        assert (s.proxy_sessions_requests, s.proxy_sessions_errors_other) == (4, 4)


async def test_an_allow_list_lets_the_operator_proxy_inside() -> None:
    async with loopback_router.running_router(
            allow_proxy=True, proxy_allow_destinations=("127.0.0.1",)) as a, \
            loopback_router.running_router() as b, open_client(a.address) as sender:
        await open_session(sender, b)
        assert isinstance(await sender.command(b"", prxy_for(b)), PKEY)
        other = PRXY(("127.0.0.2",), str(b.port), b.key_hash, None)
        assert broker_error(await sender.command(b"", other)) == b"HOST"
        assert a.router.relays.stats.refused_destinations == 1


async def test_names_resolve_on_the_proxys_threads_a_few_at_once_per_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name whose servers never answer holds a thread: one address may hold two,
    another still resolves, and a thread given up on counts until it ends."""
    release = threading.Event()
    real = socket.getaddrinfo

    def slow(host, *args, **kwargs):
        if host.endswith(".tarpit.example"):
            release.wait(10)
            raise socket.gaierror("no answer")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    policy = DestinationPolicy(("127.0.0.0/8",))
    with trio.move_on_after(0.2):
        async with trio.open_nursery() as nursery:
            for n in range(2):
                nursery.start_soon(policy.resolve, f"{n}.tarpit.example", 5223, "X")
            await wait_until(lambda: policy.resolving_for("X") == 2)
            with pytest.raises(OSError, match="2 names being resolved"):
                await policy.resolve("2.tarpit.example", 5223, "X")
            assert await policy.resolve("localhost", 5223, "Y") in ("127.0.0.1", "::1")
    assert policy.resolving_for("X") == 2  # given up on, the threads still run
    release.set()
    await wait_until(lambda: policy.resolving_for("X") == 0)


async def wait_until(predicate, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
