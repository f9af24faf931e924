"""deploy/grafana-dashboard.json reads what the router exports: every metric its
queries name is on a real router's /metrics page, and its panels fit Grafana's grid."""

from __future__ import annotations

import gc
import json
import re
from pathlib import Path

import trio
from ops_helpers import http_get

from router.client import open_client

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
METRIC = re.compile(r"\b((?:simplex_smp|smp_router|process)_[a-z0-9_]+)\b")


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_every_panel_has_a_title_a_description_and_a_query_and_fits_the_grid():
    seen = set()
    for panel in panels():
        assert panel["title"] and panel["description"], panel
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy)
                 for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & seen, f"{panel['title']} overlaps another panel"
        seen |= cells


async def test_every_metric_the_dashboard_reads_is_exported(start_router):
    info = await start_router(metrics_port=0)
    with trio.fail_after(20):
        async with open_client(info.address) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"one")
            await client.next_event()
        gc.collect()  # the pause histogram has samples once the collector has run
        _, _, body = await http_get(info.metrics_port, "/metrics")
    exported = {line.split("{")[0].split()[0] for line in body.decode().splitlines()
                if line and not line.startswith("#")}
    wanted = {name for panel in panels() for target in panel["targets"]
              for name in METRIC.findall(target["expr"])}
    assert len(wanted) > 25
    assert sorted(wanted - exported) == []
