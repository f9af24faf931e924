"""The relay-scale benchmark at a tiny setting: every phase runs, the storm settles
with one subscriber per queue and no message lost (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import relay

TINY = relay.Setting(queues=600, connections=30, processes=1, active=20, rate=50,
                     idle_seconds=1, drop_spread=0.2, return_spread=0.3, settle_timeout=120,
                     policy_settle=0, tail_seconds=0.5, grace_seconds=1.5)


@pytest.mark.parametrize("mode", ["single-task", "per-queue-task"])
def test_a_tiny_relay_load_settles_after_its_storm_without_losing_a_message(
    tmp_path: Path, mode: str
):
    result = relay.run(TINY, mode, tmp_path)
    assert "stopped" not in result
    phases = result["phases"]
    assert phases["subscribed"]["census"]["subscriptions"] == TINY.queues
    assert phases["subscribed"]["census"]["one_subscriber_each"]
    assert phases["subscribed"]["sub_errors"] == 0
    storm = phases["storm"]
    assert storm["settle_seconds"] is not None
    assert storm["census"]["one_subscriber_each"]
    assert storm["census"]["subscriptions"] == TINY.queues
    messages = result["messages"]
    assert messages["sent_ok"] > 0
    assert messages["lost"] == 0
    assert messages["idle"]["count"] > 0
    if mode == "per-queue-task":
        assert phases["subscribed"]["tasks"] > TINY.queues
    data = json.loads((tmp_path / f"relay-{mode}.json").read_text())
    assert data["benchmark"] == f"relay-{mode}"
    assert (tmp_path / f"relay-{mode}.md").read_text().startswith(mode)
