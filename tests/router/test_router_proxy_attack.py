"""Private routing under attack (issue: one address locks every client out of the
proxy): two real routers on 127.0.0.1, A proxying and B a real destination; tarpits
(listeners that accept and never answer) stand in for destinations that hang; hostile
connections to A keep many PRXYs in flight for ever new tarpit destinations, from one
address or spread over eight (127.0.0.10-17), while a fresh client from another address
(127.0.0.2) asks A for a route to B now and then (bench/proxy_attack.py, whose parts
these are; its figures with the issue's sizes are in bench/RESULTS.md).

A's pool is small here and its connect timeout short, so that the attack fills what
it can within seconds; the `stress` version has the issue's sizes and A's defaults.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import loopback_router
import pytest
import trio

from bench.proxy_attack import (
    Tally,
    attack,
    attacker_sources,
    fresh_tries,
    source_addresses,
    tarpits,
)
from router.protocol.types import PRXY
from router.server.core.relays import RelayLimits
from router.server.settings.config import (
    DEFAULT_PROXY_CONNECT_TIMEOUT,
    DEFAULT_PROXY_CONNECTS_PER_ADDRESS,
    DEFAULT_PROXY_MAX_CONNECTIONS,
    DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS,
)


@dataclass(frozen=True)
class Scale:
    pool: int
    connects_per_address: int
    held_per_address: int
    connect_timeout: float
    tarpits: int
    connections: int
    in_flight: int
    warmup: float
    tries: int
    interval: float


CI = Scale(pool=24, connects_per_address=4, held_per_address=6, connect_timeout=1.5,
           tarpits=16, connections=8, in_flight=8, warmup=3.0, tries=10, interval=0.3)
ISSUE = Scale(pool=DEFAULT_PROXY_MAX_CONNECTIONS,
              connects_per_address=DEFAULT_PROXY_CONNECTS_PER_ADDRESS,
              held_per_address=DEFAULT_PROXY_MAX_CONNECTIONS_PER_ADDRESS,
              connect_timeout=DEFAULT_PROXY_CONNECT_TIMEOUT, tarpits=64, connections=40,
              in_flight=32, warmup=25.0, tries=19, interval=1.0)


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def run_attack(scale: Scale, sources: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="router.server.core.relays")
    settings = {
        "allow_proxy": True, "proxy_allow_destinations": ("127.0.0.0/8",),
        "proxy_max_connections": scale.pool,
        "proxy_connects_per_address": scale.connects_per_address,
        "proxy_max_connections_per_address": scale.held_per_address,
        "proxy_connect_timeout": scale.connect_timeout, "proxy_error_hold": 0.2,
        "proxy_client_concurrency": scale.in_flight,
    }
    async with loopback_router.running_router(**settings) as a, \
            loopback_router.running_router() as b, tarpits(scale.tarpits) as ports:
        relays = a.router.relays
        prxy = PRXY(("127.0.0.1",), str(b.port), b.key_hash, None)
        addresses = attacker_sources(sources)
        with source_addresses():
            before = await fresh_tries(a.address, prxy, 5, scale.interval)
            assert all(t.pkey for t in before), before
            idle_descriptors = descriptors()
            tally, peaks = Tally(), {"pool": 0, "held": 0, "descriptors": 0}

            async def watch() -> None:
                while True:
                    peaks["pool"] = max(peaks["pool"], len(relays))
                    peaks["held"] = max(peaks["held"],
                                        *(relays.held_by(address) for address in addresses))
                    peaks["descriptors"] = max(peaks["descriptors"], descriptors())
                    await trio.sleep(0.05)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack, a.address, ports, addresses, scale.connections,
                                   scale.in_flight, tally)
                nursery.start_soon(watch)
                started = trio.current_time()
                await trio.sleep(scale.warmup)
                during = await fresh_tries(a.address, prxy, scale.tries, scale.interval)
                elapsed = trio.current_time() - started
                nursery.cancel_scope.cancel()

    # The fresh client got its routes to B.
    assert sum(t.pkey for t in during) >= 0.9 * len(during), during
    # A's pool, each attacker's share of it and the descriptors stayed bounded: A's
    # side and the tarpits' side of each connect, the attackers' connections, both ends.
    assert peaks["pool"] <= scale.pool
    assert peaks["held"] <= scale.held_per_address
    assert peaks["descriptors"] - idle_descriptors <= 2 * scale.pool + 2 * scale.connections + 16
    # The attackers were slowed: their PRXYs waited their turns and for their shares,
    # and each address got few answers, nothing like a tight loop.
    stats = relays.stats
    assert stats.waited > 0, stats
    if sources == 1:
        assert stats.slowed > 0
    limits = RelayLimits()
    per_address = (limits.failure_burst + limits.failures_per_second * elapsed
                   + scale.connects_per_address * (elapsed / scale.connect_timeout + 1))
    in_flight = scale.connections * scale.in_flight
    assert tally.total <= sources * per_address + in_flight, (tally.answers, elapsed)
    # One log line per pressure episode, at most one per address here.
    pressed = [r.getMessage() for r in caplog.records if "under pressure" in r.getMessage()]
    assert 1 <= len(pressed) <= sources, pressed
    assert any(address in line for line in pressed for address in addresses)
    assert stats.pressure_episodes >= len(pressed)
    assert relays.pressed_addresses <= sources


@pytest.mark.one_process("the proxy's pool, its bounds and its warnings are each worker's "
                         "own until the router-wide admission bounds "
                         "(docs/workers.md#one-router-to-the-operator)")
@pytest.mark.parametrize("sources", [1, 8])
async def test_a_fresh_client_gets_its_route_while_attackers_fill_the_proxy_with_tarpits(
    sources: int, caplog: pytest.LogCaptureFixture,
) -> None:
    await run_attack(CI, sources, caplog)


@pytest.mark.stress
@pytest.mark.parametrize("sources", [1, 8])
async def test_the_issues_attack_at_its_size_with_the_default_pool(
    sources: int, caplog: pytest.LogCaptureFixture,
) -> None:
    await run_attack(ISSUE, sources, caplog)
