"""The memory breakdown against the real router: its parts account for what tracemalloc sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import harness, memory_profile
from bench.census import COMPONENTS
from bench.harness import RouterProcess, WorkerGroup, connect, subscribe

QUEUES, MESSAGES, CONNECTIONS = 3000, 200, 60


def _read(router: RouterProcess) -> tuple[int, dict[str, int]]:
    router.call("full_collection")
    traced = router.call("traced")["traced"]
    parts = router.call("components")
    return traced, {name: parts[name]["bytes"] for name in COMPONENTS}


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_the_components_add_up_to_the_traced_total_within_ten_percent(store: str):
    """Queue records, stored messages (small bodies, so that no single large object
    makes the sum easy), idle connections and subscriptions: the component walk is
    measured by object sizes, the total by tracemalloc, in the same router."""
    with RouterProcess("single-task", tracemalloc=True,
                       extra=["--store", store, "--fsync", "never"]) as router:
        memory_profile._warm_up(router, traced=True)
        traced_before, parts_before = _read(router)
        router.call("preload", start=0, count=QUEUES)
        router.call("inject", start=0, count=MESSAGES, body_size=100, distinct_bodies=True)
        with WorkerGroup(router.address, 1) as workers:
            per_worker = connect(workers, CONNECTIONS)
            subscribe(workers, per_worker, MESSAGES, QUEUES - MESSAGES)
            traced_after, parts_after = _read(router)
            census = router.call("census")
    assert census["connections"] == CONNECTIONS
    assert census["subscriptions"] == QUEUES - MESSAGES
    grown = {name: parts_after[name] - parts_before[name] for name in COMPONENTS}
    total = traced_after - traced_before
    assert grown["connections"] > 0 and grown["subscriptions"] > 0
    assert grown["queue_table"] > 0
    assert abs(sum(grown.values()) - total) <= 0.10 * total, (grown, total)


def test_a_quick_profile_reports_every_store_and_mode(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    size = memory_profile.Size(queues=120, messages=20, connections=6, traffic_seconds=0.5)
    memory_profile.run(size, stores=("memory", "journal"))
    data = json.loads((tmp_path / "memory-profile.json").read_text())
    assert set(data["points"]) == {f"{s} {m}" for s in ("memory", "journal")
                                   for m in memory_profile.MODES}
    for point in data["points"].values():
        unit = point["per_unit"]
        # a 16 KB body costs at least its bytes where the store keeps bodies in memory
        if point["store"] == "memory":
            assert unit["message_16k"]["live"] >= memory_profile.LARGE_BODY
        assert unit["connection"]["live"] > 1000
        assert point["traced"]["traffic"]["delivered"] > 0
    assert (tmp_path / "memory-profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_explains_negative_free_space_figures():
    """A phase that reuses freed heap has a negative `malloc free` per unit: the table
    says what that means beside the figure."""
    unit = {"live": 100.0, "rss": 120.0, "trimmed": 110.0, "pymalloc_in_use": 90.0,
            "pymalloc_free": -12.0, "malloc_in_use": 30.0, "malloc_free": -1319.0,
            "native": 20.0, "components": dict.fromkeys(COMPONENTS, 10.0), "types": []}
    keys = ("queue", "message_empty", "message_16k", "connection", "subscription",
            "traffic_per_connection", "after_traffic_per_connection", "storm_per_connection",
            "after_storm_per_connection")
    result = {"parameters": {"queues": 1, "messages": 1, "connections": 1, "subscriptions": 1},
              "points": {"memory single-task": {"per_unit": dict.fromkeys(keys, unit)}}}
    text = memory_profile.table(result)
    assert "-1,319" in text
    assert memory_profile.NEGATIVE_FIGURES in text
    assert "free heap shrank by that much per unit" in text


def test_the_subscription_sweep_table_says_what_a_negative_figure_means():
    from bench import memory

    side = {"rss_per_subscription": -12.0, "trimmed_per_subscription": -3.0,
            "traced_per_subscription": 5.0, "tasks": 3, "rss_per_connection": 10.0,
            "traced_per_connection": 9.0, "rss_subscribed": 2**20}
    row = {"size": 200, "connections": 4, "single-task": side, "per-queue-task": side,
           "ratio_rss": 1.0, "ratio_trimmed": 1.0, "ratio_traced": 1.0}
    text = memory.table([row])
    assert "-12" in text and text.rstrip().endswith(memory.SMALL_SIZES_NOTE)
