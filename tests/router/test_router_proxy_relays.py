"""The proxy's pool of connections to destination routers (router/server/core/relays.py),
against real routers listening on 127.0.0.1: reuse, identity, a destination that stops
and comes back, the bound on connections, a requester that goes away mid-connect.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import loopback_router
import pytest
import trio

from bench.proxy_attack import tarpits
from router.protocol.types import PING, PONG
from router.server.core import relays as relays_module
from router.server.core.proxy_destinations import DestinationPolicy
from router.server.core.relays import (
    HOST,
    NETWORK,
    TIMEOUT,
    TIMEOUTS_BEFORE_CLOSING,
    Destination,
    RelayError,
    RelayLimits,
    Relays,
    destination,
)
from router.server.edge.encrypted import EncryptedTransport
from router.server.edge.gate import GatedTransport
from router.server.router import RouterInfo

QUICK = RelayLimits(max_relays=8, connect_timeout=5.0, answer_timeout=5.0,
                    idle_timeout=30.0, error_hold=0.0)


def running_router(port: int = 0,
                   data_dir: Path | None = None) -> AbstractAsyncContextManager[RouterInfo]:
    return loopback_router.running_router(port=port, store="memory", data_dir=data_dir)


LOOPBACK = DestinationPolicy(("127.0.0.0/8",))


@asynccontextmanager
async def running_pool(limits: RelayLimits = QUICK, **options) -> AsyncIterator[Relays]:
    pool = Relays(limits, **{"policy": LOOPBACK, **options})
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        try:
            yield pool
        finally:
            nursery.cancel_scope.cancel()


def dest_of(info: RouterInfo) -> Destination:
    return Destination("127.0.0.1", info.port, info.key_hash)


async def wait_until(predicate, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def test_a_destination_takes_the_first_host_reachable_without_tor() -> None:
    key = bytes(32)
    assert destination(("abc.onion", "smp.example.net"), "", key) == Destination(
        "smp.example.net", 5223, key)
    assert destination(("127.0.0.1",), "5224", key).port == 5224
    with pytest.raises(RelayError) as onion_only:
        destination(("abc.onion",), "", key)
    assert onion_only.value.kind == HOST
    with pytest.raises(RelayError) as bad_port:
        destination(("h",), "99999", key)
    assert bad_port.value.kind == NETWORK


async def test_one_connection_per_destination_reused_by_every_request() -> None:
    async with running_router() as b, running_pool() as pool:
        relays = await _gather([lambda: pool.relay(dest_of(b)) for _ in range(5)])
        assert len({id(r) for r in relays}) == 1
        relay = relays[0]
        assert relay.alive and relay.version >= 14
        assert pool.by_session(relay.session_id) is relay
        assert await pool.relay(dest_of(b)) is relay
        assert b.router.counters.connections_total == 1
        assert pool.connects == 1 and len(pool) == 1


async def test_the_proxy_hello_says_proxy_server_and_blocks_are_not_encrypted() -> None:
    async with running_router() as b, running_pool() as pool:
        relay = await pool.relay(dest_of(b))
        session = relay.client.session
        assert session is not None and session.cipher is None
        assert session.client_private is not None and session.router_dh_key is not None
        (conn,) = b.router.connections.values()
        # The destination reads the proxy's blocks as they come: no block encryption.
        assert isinstance(conn.transport, GatedTransport)
        assert not isinstance(conn.transport.inner, EncryptedTransport)


async def test_a_wrong_key_hash_is_a_network_error_and_no_connection() -> None:
    async with running_router() as b, running_pool() as pool:
        wrong = Destination("127.0.0.1", b.port, os.urandom(32))
        with pytest.raises(RelayError) as caught:
            await pool.relay(wrong)
        assert caught.value.kind == NETWORK
        assert len(pool) == 0 and pool.connect_failures == 1


async def test_a_stopped_destination_fails_fast_and_a_restarted_one_is_reconnected(
    tmp_path: Path,
) -> None:
    async with running_pool() as pool:
        async with running_router(data_dir=tmp_path) as b:
            port, dest = b.port, dest_of(b)
            first = await pool.relay(dest)
        await wait_until(lambda: not first.alive)
        assert pool.by_session(first.session_id) is None
        with trio.fail_after(QUICK.connect_timeout):
            with pytest.raises(RelayError) as down:
                await pool.relay(dest)
        assert down.value.kind == NETWORK
        async with running_router(port=port, data_dir=tmp_path) as b_again:
            assert b_again.key_hash == dest.key_hash
            second = await pool.relay(dest)
            assert second is not first and second.alive
            assert pool.by_session(second.session_id) is second


async def test_a_failure_is_held_for_error_hold_then_tried_again(tmp_path: Path) -> None:
    limits = RelayLimits(connect_timeout=5.0, error_hold=0.5)
    async with running_pool(limits) as pool:
        async with running_router(data_dir=tmp_path) as b:
            port, dest = b.port, dest_of(b)
        with pytest.raises(RelayError):
            await pool.relay(dest)
        async with running_router(port=port, data_dir=tmp_path):
            with pytest.raises(RelayError):  # held: not tried again yet
                await pool.relay(dest)
            assert pool.connect_failures == 1
            await trio.sleep(0.6)
            assert (await pool.relay(dest)).alive


async def test_the_pool_bound_closes_the_least_recently_used_idle_connection() -> None:
    limits = RelayLimits(max_relays=2, connect_timeout=5.0, error_hold=0.0)
    async with running_router() as b, running_router() as c, running_router() as d, \
            running_pool(limits) as pool:
        rb = await pool.relay(dest_of(b))
        await trio.sleep(0.01)
        rc = await pool.relay(dest_of(c))
        rd = await pool.relay(dest_of(d))
        assert len(pool) == 2
        await wait_until(lambda: not rb.alive)
        assert rc.alive and rd.alive
        assert pool.by_session(rb.session_id) is None
        await wait_until(lambda: len(b.router.connections) == 0)


async def test_a_full_pool_of_busy_connections_waits_then_refuses_another_destination() -> None:
    limits = RelayLimits(max_relays=1, connect_timeout=0.5, error_hold=0.0)
    async with running_router() as b, running_router() as c, running_pool(limits) as pool:
        rb = await pool.relay(dest_of(b))
        rb.in_flight += 1  # a forwarded command waits for its answer
        with pytest.raises(RelayError) as caught:
            await pool.relay(dest_of(c))
        assert caught.value.kind == NETWORK and "no room" in caught.value.detail
        assert rb.alive and c.router.counters.connections_total == 0
        assert (pool.stats.waited, pool.stats.no_room) == (1, 1)


async def test_a_prxy_waiting_for_room_gets_it_when_a_connection_falls_idle() -> None:
    limits = RelayLimits(max_relays=1, connect_timeout=5.0, error_hold=0.0)
    async with running_router() as b, running_router() as c, running_pool(limits) as pool:
        rb = await pool.relay(dest_of(b))
        rb.in_flight += 1
        async with trio.open_nursery() as nursery:
            got = []

            async def ask() -> None:
                got.append(await pool.relay(dest_of(c)))

            nursery.start_soon(ask)
            await wait_until(lambda: pool.stats.waited == 1)
            # The forwarded command is answered: B's connection, idle, makes room.
            rb.in_flight -= 1
            await pool.request(rb, PING(), os.urandom(24))
        assert got[0].alive and not rb.alive and pool.stats.no_room == 0


async def test_idle_connections_are_closed() -> None:
    limits = RelayLimits(idle_timeout=0.2, connect_timeout=5.0)
    async with running_router() as b, running_pool(limits) as pool:
        relay = await pool.relay(dest_of(b))
        await wait_until(lambda: not relay.alive and len(pool) == 0)
        await wait_until(lambda: len(b.router.connections) == 0)


async def test_a_requester_cancelled_mid_connect_does_not_spoil_the_destination() -> None:
    async with running_router() as b, running_pool() as pool:
        with trio.move_on_after(0.0005):
            await pool.relay(dest_of(b))
        relay = await pool.relay(dest_of(b))
        assert relay.alive and b.router.counters.connections_total == 1


async def _gather(calls) -> list:
    results: list = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(one, i)
    return results


async def test_a_destination_that_stops_answering_times_out_and_is_dropped_after_three() -> None:
    limits = RelayLimits(connect_timeout=5.0, answer_timeout=0.2, error_hold=0.0)
    async with running_router() as b, running_pool(limits) as pool:
        relay = await pool.relay(dest_of(b))
        b.router.suspend()  # B reads no more blocks
        try:
            for n in range(TIMEOUTS_BEFORE_CLOSING):
                assert relay.alive
                with pytest.raises(RelayError) as caught:
                    await pool.request(relay, PING(), os.urandom(24))
                assert caught.value.kind == TIMEOUT
                assert relay.timeouts == n + 1 or not relay.alive
        finally:
            b.router.resume()
        await wait_until(lambda: not relay.alive)
        assert pool.by_session(relay.session_id) is None
        again = await pool.relay(dest_of(b))
        assert again is not relay and isinstance(
            await pool.request(again, PING(), os.urandom(24)), PONG)


# --- the pool shared between client addresses ----------------------------------------------

X, Y, Z = "192.0.2.1", "198.51.100.1", "203.0.113.1"  # client addresses as shares count them


def tarpit_dest(port: int) -> Destination:
    return Destination("127.0.0.1", port, os.urandom(32))


async def test_an_address_at_its_connect_bound_waits_and_another_connects_at_once() -> None:
    limits = RelayLimits(max_relays=8, connects_per_address=2, connect_timeout=1.0,
                         error_hold=0.0)
    async with running_router() as b, tarpits(3) as ports, running_pool(limits) as pool:
        failures: list[RelayError] = []

        async def hang(port: int) -> None:
            with pytest.raises(RelayError) as caught:
                await pool.relay(tarpit_dest(port), X)
            failures.append(caught.value)

        async with trio.open_nursery() as nursery:
            for port in ports[:2]:
                nursery.start_soon(hang, port)
            await wait_until(lambda: pool.held_by(X) == 2)
            await trio.sleep(0.5)  # so that its wait outlasts the first two's connect timeout
            nursery.start_soon(hang, ports[2])
            await wait_until(lambda: pool.stats.waited == 1)
            assert pool.connecting == 2 and pool.held_by(X) == 2
            relay = await pool.relay(dest_of(b), Y)  # another address is not held back
            assert relay.alive and pool.connecting == 2
        # The third waited for one of X's own slots, then had its own attempt.
        assert len(failures) == 3 and all(f.kind == NETWORK for f in failures)
        assert pool.connect_failures == 3 and pool.stats.no_room == 0


async def test_a_full_pool_gives_the_crowds_unfinished_connect_away_not_a_connected_one() -> None:
    limits = RelayLimits(max_relays=3, connects_per_address=3, held_per_address=3,
                         connect_timeout=5.0, error_hold=0.0)
    async with running_router() as b, running_router() as c, tarpits(2) as ports, \
            running_pool(limits) as pool:
        rb = await pool.relay(dest_of(b), Y)
        async with trio.open_nursery() as nursery:
            errors: list[RelayError] = []

            async def hang(port: int) -> None:
                try:
                    await pool.relay(tarpit_dest(port), X)
                except RelayError as e:
                    errors.append(e)

            for port in ports:
                nursery.start_soon(hang, port)
            await wait_until(lambda: pool.held_by(X) == 2)
            assert len(pool) == 3
            rc = await pool.relay(dest_of(c), Z)  # X holds most: its oldest connect goes
            assert rc.alive and rb.alive and len(pool) == 3
            assert pool.stats.evicted == 1 and pool.held_by(X) == 1
            await wait_until(lambda: len(errors) == 1)
            assert "make room" in errors[0].detail
            nursery.cancel_scope.cancel()


async def test_one_addresss_failure_is_held_for_it_and_not_for_another(tmp_path: Path) -> None:
    limits = RelayLimits(connect_timeout=5.0, error_hold=30.0)
    async with running_pool(limits) as pool:
        async with running_router(data_dir=tmp_path) as b:
            port, dest = b.port, dest_of(b)
        with pytest.raises(RelayError):
            await pool.relay(dest, X)  # B is down
        async with running_router(port=port, data_dir=tmp_path):
            with pytest.raises(RelayError):  # held for X, for error_hold: no new attempt
                await pool.relay(dest, X)
            assert pool.connect_failures == 1
            relay = await pool.relay(dest, Y)  # X's failure does not hold B for Y
            assert relay.alive
            assert await pool.relay(dest, X) is relay  # nor hides the connection Y made


async def test_an_address_whose_requests_keep_failing_takes_turns_at_the_failure_rate() -> None:
    limits = RelayLimits(failures_per_second=10.0, failure_burst=2)
    async with running_pool(limits) as pool:
        for _ in range(2):
            pool.failed(X)
        assert pool.turn(X) == 0.0  # within its burst
        pool.failed(X)
        turns = [pool.turn(X) for _ in range(4)]
        # one after another, a tenth of a second apart; another address does not wait
        gaps = [later - earlier for earlier, later in itertools.pairwise(turns)]
        assert 0 < turns[0] <= 0.1 and all(abs(gap - 0.1) < 0.01 for gap in gaps), turns
        assert pool.turn(Y) == 0.0 and pool.stats.slowed == 4
        assert pool.stats.pressure_episodes == 1


async def test_a_pressure_episode_is_logged_once_and_ends_when_the_pressure_does(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relays_module, "LOG_INTERVAL", 0.2)
    limits = RelayLimits(idle_timeout=0.2, failures_per_second=100.0, failure_burst=1)
    async with running_pool(limits) as pool:
        for _ in range(5):
            pool.failed(X)
        assert pool.pressed_addresses == 1
        await wait_until(lambda: pool.pressed_addresses == 0)
        await trio.sleep(0.2)  # past the log's interval
        for _ in range(5):
            pool.failed(X)
    lines = [r.getMessage() for r in caplog.records if "under pressure" in r.getMessage()]
    assert len(lines) == 2 and all(X in line for line in lines)
    assert pool.stats.pressure_episodes == 2
