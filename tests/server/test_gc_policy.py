"""The collector policy: old objects are collected and frozen in slices of a bounded
size, a settled wave is frozen, and a quiet-time full collection frees what died
while frozen. Pause durations are recorded, never asserted."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from router.server.ops import gc_policy
from router.server.ops.gc_policy import GcPauses, GcPolicy


class Node:
    """A gc-tracked object; two of them referring to each other make a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """The process-wide collector state as the other tests expect it."""
    gc.collect()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.collect()


def old_objects() -> int:
    return len(gc.get_objects(generation=2))


def make_old(count: int) -> list[Node]:
    nodes = [Node() for _ in range(count)]
    gc.collect()  # survivors of a full collection are in the oldest generation
    return nodes


def test_collect_and_freeze_empties_the_oldest_generation_and_keeps_the_objects():
    nodes = make_old(5000)
    policy = GcPolicy()
    policy.collect_and_freeze()
    assert old_objects() < 100
    assert gc.get_freeze_count() >= 5000
    assert policy.freezes == 1
    assert all(isinstance(n, Node) for n in nodes)


async def test_growth_is_frozen_in_slices_of_the_budget():
    policy = GcPolicy(budget=3000, settle=3600, check_interval=0.01, full_interval=None)
    kept: list[list[Node]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        for _ in range(5):
            kept.append(make_old(2000))
            await trio.sleep(0.05)
            assert old_objects() < 3000 + 2000  # never more than one slice past the budget
        nursery.cancel_scope.cancel()
    assert policy.freezes >= 2
    assert gc.get_freeze_count() >= 6000


async def test_a_settled_wave_is_frozen():
    policy = GcPolicy(budget=10**9, settle=0.05, settle_floor=1000, check_interval=0.01,
                      full_interval=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        nodes = make_old(3000)
        with trio.fail_after(5):
            while policy.freezes == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert old_objects() < 1000
    assert len(nodes) == 3000
    assert policy.trims == (1 if gc_policy._malloc_trim is not None else 0)


async def test_a_settled_wave_hands_free_heap_back(monkeypatch):
    trimmed: list[int] = []
    monkeypatch.setattr(gc_policy, "_malloc_trim", lambda pad: trimmed.append(pad) or 1)
    policy = GcPolicy(budget=10**9, settle=0.05, settle_floor=1000, check_interval=0.01,
                      full_interval=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        nodes = make_old(3000)
        with trio.fail_after(5):
            while not trimmed:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert trimmed == [0] and policy.trims == 1 and len(nodes) == 3000


def burn_cpu(seconds: float) -> None:
    """Keep the process busy (a burst of blocks, as the policy sees it)."""
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass


async def test_the_heap_is_trimmed_once_a_burst_ends(monkeypatch):
    trimmed: list[float] = []
    monkeypatch.setattr(gc_policy, "_malloc_trim", lambda pad: trimmed.append(time.monotonic()))
    policy = GcPolicy(budget=10**9, settle=3600, trim_floor=0.1, trim_settle=0.1,
                      check_interval=0.01, full_interval=None)
    gc.freeze()  # each look walks the oldest generation: kept short, as the policy keeps it
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        await trio.sleep(0.05)
        burn_cpu(0.2)
        ended = time.monotonic()
        assert not trimmed  # not while busy
        with trio.fail_after(5):
            while not trimmed:
                await trio.sleep(0.01)
        await trio.sleep(0.3)  # idle: no second trim without a second burst
        nursery.cancel_scope.cancel()
    assert len(trimmed) == 1 and policy.trims == 1
    assert trimmed[0] - ended >= 0.1  # after the burst ended, not during it


async def test_no_trim_without_a_burst(monkeypatch):
    trimmed: list[int] = []
    monkeypatch.setattr(gc_policy, "_malloc_trim", lambda pad: trimmed.append(pad) or 1)
    policy = GcPolicy(budget=10**9, settle=3600, trim_floor=5.0, trim_settle=0.05,
                      check_interval=0.01, full_interval=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        burn_cpu(0.1)
        await trio.sleep(0.3)
        nursery.cancel_scope.cancel()
    assert trimmed == [] and policy.trims == 0


async def test_a_quiet_time_collection_frees_cycles_that_died_frozen():
    cycles = []
    for _ in range(1000):
        a, b = Node(), Node()
        a.other, b.other = b, a
        cycles.append(a)
    alive = [weakref.ref(node) for node in cycles]
    GcPolicy().collect_and_freeze()
    del cycles, a, b  # dead now, but frozen: only a collection that unfreezes sees them
    gc.collect()
    assert all(ref() is not None for ref in alive)
    opened = [0]
    policy = GcPolicy(budget=10**9, settle=3600, check_interval=0.01, full_interval=0.05,
                      quiet=0.05)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: opened[0])
        with trio.fail_after(5):
            while policy.full_collections == 0:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert all(ref() is None for ref in alive)
    assert policy.last_full_ms is not None


async def test_no_full_collection_while_clients_keep_connecting():
    opened = [0]
    policy = GcPolicy(budget=10**9, settle=3600, check_interval=0.01, full_interval=0.02,
                      quiet=0.2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: opened[0])
        for _ in range(20):
            opened[0] += 1
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert policy.full_collections == 0


async def test_the_oldest_generation_is_left_to_the_policy_while_it_runs():
    before = gc.get_threshold()
    policy = GcPolicy(full_interval=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        await trio.sleep(0.01)
        assert gc.get_threshold()[:2] == before[:2]
        assert gc.get_threshold()[2] > 10**9
        nursery.cancel_scope.cancel()
    assert gc.get_threshold() == before


async def test_a_young_collection_with_too_much_to_walk_freezes_it_instead():
    policy = GcPolicy(young_budget=5000, full_interval=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(policy.run, lambda: 0)
        await trio.sleep(0.01)
        gc.disable()  # no automatic pass: the nodes stay young
        try:
            nodes = [Node() for _ in range(20_000)]
            frozen = gc.get_freeze_count()
            gc.collect(1)
        finally:
            gc.enable()
        nursery.cancel_scope.cancel()
    assert policy.young_freezes >= 1
    assert gc.get_freeze_count() >= frozen + 20_000
    assert policy._before_collection not in gc.callbacks
    assert len(nodes) == 20_000


def test_pauses_are_recorded_by_generation():
    pauses = GcPauses()
    try:
        gc.collect(0)
        gc.collect(2)
        assert pauses.count[0] >= 1 and pauses.count[2] >= 1
        assert pauses.longest >= pauses.longest_ms[0] >= 0.0
        pauses.reset()
        assert pauses.count == [0, 0, 0]
    finally:
        pauses.close()
    assert pauses._callback not in gc.callbacks
