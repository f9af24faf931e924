"""Another client's PING is answered promptly while 16 connections flood the router
with blocks of signed NEW, KEY and DEL (router/server/core/turns.py).

The router runs on 127.0.0.1 in a process of its own (`smp-router serve`, memory
store, NEW unlimited), the flood comes from another process: each connection
creates 80 queues per NEW block, secures them with a KEY block and deletes
them with a DEL block, every transmission signed by the queue's key
(`bench/fairness.py`, which `python -m bench fairness` runs too). This process
sends a PING every 20 ms meanwhile.

A bound on latency under adversarial load, not a speed claim: a block of 80
such transmissions is tens of milliseconds of signature checks and key
making, and before blocks took turns by their cost, 16 of them in one pass of
the router's scheduler put the PING at hundreds of milliseconds
(bench/RESULTS.md, "Fairness"). Now a pass does at most `AT_ONCE` turns of
`TURN_BUDGET`, so the PING waits for a few milliseconds of work, plus whatever
the machine's other processes take from the router: 20 ms leaves room for a
busy two-core machine. The flood must have done its work meanwhile (every
answer OK, each connection through at least two rounds), so a quiet PING
cannot pass for a fair one.
"""

from __future__ import annotations

import trio

from bench.fairness import QUEUES_PER_BLOCK, measure, router_process

CONNECTIONS = 16
SECONDS = 5.0
MEDIAN_BOUND_MS = 20.0


async def test_a_ping_is_answered_promptly_during_a_flood_of_signed_blocks():
    with trio.fail_after(120):
        async with router_process() as address:
            result = await measure(address, CONNECTIONS, SECONDS)
    print(result)
    flood = result["flood"]
    assert flood["not_ok"] == 0, flood
    assert flood["cycles"] >= 2 * CONNECTIONS, flood
    assert flood["transmissions"] == flood["cycles"] * 3 * QUEUES_PER_BLOCK, flood
    during = result["flood_ms"]
    assert during["samples"] >= 20, during
    assert during["median"] < MEDIAN_BOUND_MS, result
