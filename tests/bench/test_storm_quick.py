"""The storm bench runs tiny on every store kind and writes its figures (no timing is
asserted): every SUB answered OK, every waiting message delivered once."""

from __future__ import annotations

import json
from pathlib import Path

from bench import storm


def test_a_tiny_storm_subscribes_every_queue_on_every_store_kind(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(storm, "QUICK_CACHE_RECORDS", 300)
    results = storm.run(quick=True, queues=240, connections=3, messages_every=4, out=tmp_path)
    assert [r["kind"] for r in results] == storm.KINDS
    for r in results:
        assert r["errors"] == 0, r
        assert r["messages"] == 240 // 4, r  # one MSG per queue with a message, no more
        assert r["blocks"] >= 3 and r["ping_ms"]["samples"] > 0
        assert r["router_cpu_s"] > 0 and r["rss_after"] > 0
    data = json.loads((tmp_path / "storm.json").read_text())
    assert data["parameters"]["queues"] == 240
    cache = data["record_cache"]
    assert cache["full_bytes"] > cache["plain_bytes"] > 0
    assert (tmp_path / "storm.md").read_text().startswith("|")
