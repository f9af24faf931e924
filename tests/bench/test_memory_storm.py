"""What a reconnect storm leaves in the router's memory (bench/memory.py, storm;
router/server/core/turns.py, blocks in progress): a crowd of connections each
subscribing its ~100 queues in one block at once must not leave the router holding
many times the memory its subscriptions use.

The bound is on pymalloc's arenas, in a router process of its own: CPython's
small-object allocator frees an arena only once every object in it is gone, so
arenas that grew by far more than the subscriptions' own objects are the storm's
temporaries pinned by a few long-lived objects allocated among them. Before the
blocks in progress were bounded, this storm grew them by ~520 B per subscription
(a `Sub` is a 48-byte block, its map entries a malloc'd table); now ~50 - 110
(arenas are 1 MiB: 52 B per subscription here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import harness, memory

QUEUES, CONNECTIONS = 20_000, 200  # 100 SUBs, one block, per connection
ARENAS_PER_SUBSCRIPTION = 300  # bytes of pymalloc arenas a subscription may leave


def test_a_storm_of_sub_blocks_leaves_arenas_near_what_its_subscriptions_use():
    grown = memory.storm_growth("memory", QUEUES, CONNECTIONS, QUEUES,
                                 settle_timeout=0)
    assert grown["subscribed"] == QUEUES
    assert grown["per_subscription_pymalloc_in_use"] < ARENAS_PER_SUBSCRIPTION / 2, grown
    assert grown["per_subscription_pymalloc_arenas"] <= ARENAS_PER_SUBSCRIPTION, grown


def test_the_storm_table_has_the_storm_beside_the_quiet_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    size = memory.StormSize(queues=400, connections=8, quiet_subscriptions=100,
                            quiet_connections=2)
    memory.storm(size, stores=("journal",), settle_timeout=0)
    data = json.loads((tmp_path / "memory-storm.json").read_text())
    assert [row["store"] for row in data["stores"]] == ["journal"]
    for row in data["stores"]:
        assert row["storm"]["subscribed"] == 400
        assert row["quiet"]["subscribed"] == 100
        assert row["storm"]["live_per_subscription"] > 0
    table = (tmp_path / "memory-storm.md").read_text()
    assert "| journal | quiet |" in table
