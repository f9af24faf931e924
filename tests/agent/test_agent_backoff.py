"""Reconnection delays: the formula, and the agent's attempts on a mock clock."""

from __future__ import annotations

import random
from contextlib import asynccontextmanager

import pytest
import trio

from router.client import ConnectionClosed, RecipientQueue, format_address
from router.client.agent import open_agent
from router.client.agent_state import ConnectFailed
from router.client.backoff import Backoff

ADDRESS = format_address(b"k" * 32, "127.0.0.1", 9)
QUEUE = RecipientQueue(b"r" * 24, b"s" * 24, b"a" * 32, b"k" * 44, b"d" * 32, b"v" * 44,
                       b"b" * 32, True)


def test_the_ceiling_doubles_from_the_initial_delay_up_to_the_maximum():
    backoff = Backoff(initial=0.5, maximum=10.0, factor=2.0)
    assert [backoff.ceiling(n) for n in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert backoff.ceiling(10**6) == 10.0  # no overflow however long it fails


def test_every_delay_lies_between_the_jittered_floor_and_the_ceiling():
    backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.25)
    rng = random.Random(7)
    for attempt in range(40):
        d = backoff.delay(attempt, rng)
        assert backoff.ceiling(attempt) * 0.75 <= d <= backoff.ceiling(attempt)


def test_jitter_spreads_the_delays_of_clients_that_failed_together():
    backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.5)
    delays = {backoff.delay(0, random.Random(seed)) for seed in range(50)}
    assert len(delays) == 50 and min(delays) >= 0.5


@pytest.mark.parametrize(
    "options", [dict(initial=0), dict(initial=2, maximum=1), dict(factor=0.5), dict(jitter=2)]
)
def test_nonsensical_backoff_settings_are_refused(options):
    with pytest.raises(ValueError):
        Backoff(**options)


async def test_the_agent_retries_a_router_that_stays_away_ever_more_slowly_up_to_the_cap(
    autojump_clock,
):
    attempts: list[float] = []

    @asynccontextmanager
    async def refused(address: str):
        attempts.append(trio.current_time())
        raise ConnectionClosed("connection refused")
        yield  # pragma: no cover  (makes this an async generator)

    backoff = Backoff(initial=1.0, maximum=20.0, factor=2.0, jitter=0.5)
    failures: list[ConnectFailed] = []
    with trio.fail_after(1000):
        async with open_agent(backoff=backoff, connect=refused, rng=random.Random(1)) as agent:
            agent.add_queues(ADDRESS, [QUEUE])
            async for event in agent.events():
                if isinstance(event, ConnectFailed):
                    failures.append(event)
                    if len(failures) == 10:
                        break
    assert [f.attempt for f in failures] == list(range(1, 11))
    gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    for n, (gap, failure) in enumerate(zip(gaps, failures, strict=False)):
        assert gap == pytest.approx(failure.retry_in)
        assert backoff.ceiling(n) / 2 <= gap <= backoff.ceiling(n)
    assert max(gaps) <= 20.0 and gaps[-1] >= 10.0  # grew to the cap and stayed under it
