"""The answer time of a refused command does not say whether its queue exists.

The reference router's own check: interleaved samples of SUB naming a queue id
that does not exist and SUB on an existing queue signed with the wrong key, both
answered `ERR AUTH`; the ratio of the median times must stay within 30 % of 1
(docs/protocol.md, "Transmissions and authorization"). With several workers the
missing ids are of the existing queue's worker: an id's worker is a function of
the id that anyone can compute (docs/workers.md#ownership-by-queue), so a hand-off
to another worker says nothing about whether the queue exists. Measured in one run, and
measured once more with twice the samples before failing, since the machine that
runs it may be busy with other work. The ratios are printed (bench/RESULTS.md
quotes them).
"""

from __future__ import annotations

import os
import random
import statistics
import time

import pytest
import trio
from worker_count import test_workers

from router.client import SMPClient, open_client
from router.protocol import crypto
from router.protocol.types import AUTH, ERR, SUB
from router.server.core.ownership import Ownership

TOLERANCE = 0.30  # the reference's
SAMPLES = 400  # of each kind, per attempt


async def _timed_sub(client: SMPClient, entity_id: bytes, seed: bytes) -> float:
    started = time.perf_counter()
    resp = await client.command(entity_id, SUB(), seed)
    elapsed = time.perf_counter() - started
    assert resp == ERR(AUTH), resp
    return elapsed


async def _median_ratio(client: SMPClient, existing: bytes, samples: int) -> tuple[float, ...]:
    """(median missing, median wrong key, ratio), samples interleaved in random order."""
    wrong_seed, _ = crypto.new_ed25519()
    ownership = Ownership(test_workers(), 0)
    owner = ownership.owner_of(existing)
    missing_times: list[float] = []
    wrong_key_times: list[float] = []
    kinds = [True, False] * samples
    random.shuffle(kinds)
    for missing in kinds:
        if missing:
            missing_times.append(await _timed_sub(client, ownership.mint(owner), wrong_seed))
        else:
            wrong_key_times.append(await _timed_sub(client, existing, wrong_seed))
    t_missing = statistics.median(missing_times)
    t_wrong_key = statistics.median(wrong_key_times)
    return t_missing, t_wrong_key, t_missing / t_wrong_key


# Every store, postgres included (its lookups are database reads), unless
# SMP_E2E_STORES narrows them.
STORES = os.environ.get("SMP_E2E_STORES", "memory,journal,sqlite,postgres").split(",")


@pytest.fixture(params=[kind for kind in STORES if kind])
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_sub_on_a_missing_queue_takes_as_long_as_sub_with_a_wrong_key(router):
    with trio.fail_after(120):
        async with open_client(router.address) as client:
            queues = [await client.create_queue() for _ in range(20)]
            existing = queues[7].recipient_id
            for samples in (SAMPLES, 2 * SAMPLES):
                t_missing, t_wrong_key, ratio = await _median_ratio(client, existing, samples)
                if abs(1 - ratio) < TOLERANCE:
                    break
            store = router.router.config.store
            print(
                f"\n{store}: SUB missing {t_missing * 1e6:.0f} us, wrong key "
                f"{t_wrong_key * 1e6:.0f} us, ratio {ratio:.3f} ({samples} samples each)"
            )
            assert abs(1 - ratio) < TOLERANCE, (t_missing, t_wrong_key)
