"""The memory census of a running router: the control port's `memory`, the metrics'
gauges, and the bounds on what a census costs."""

from __future__ import annotations

import pytest
import trio
from ops_helpers import open_control
from test_metrics import scrape

from router.client import open_client
from router.server.ops.memory import COMPONENTS, take_census

ADMIN, USER = "admin-pw", "user-pw"


def _parts(lines: list[str]) -> dict[str, int]:
    """{component: bytes} from the `name: N bytes, M objects` lines."""
    out = {}
    for line in lines:
        name, _, rest = line.partition(": ")
        if name in COMPONENTS:
            out[name] = int(rest.split()[0])
    return out


@pytest.fixture
async def router(start_router, tmp_path):
    return await start_router(control_port=0, control_admin_password=ADMIN,
                              control_user_password=USER, metrics_port=0)


async def test_memory_on_the_control_port_shows_each_part_and_grows_with_clients(router):
    with trio.fail_after(30):
        control = await open_control(router.control_port)
        await control.command(f"auth {ADMIN}")
        before = await control.until("memory fresh", lambda line: line.startswith("census:"))
        async with open_client(router.address) as a, open_client(router.address) as b:
            for client in (a, b):
                for _ in range(5):
                    await client.create_queue(subscribe=True)
            after = await control.until("memory fresh", lambda line: line.startswith("census:"))
            cached = await control.until("memory", lambda line: line.startswith("census:"))
    parts_before, parts_after = _parts(before), _parts(after)
    assert set(parts_after) == set(COMPONENTS)
    # two idle connections are kilobytes each; ten queue records and subscriptions more
    assert parts_after["connections"] - parts_before["connections"] > 2 * 4000
    assert parts_after["subscriptions"] > parts_before["subscriptions"]
    assert parts_after["queue_table"] > parts_before["queue_table"]
    assert any(line.startswith("type coroutine: ") for line in after)
    assert any(line.startswith("total: ") for line in after)
    assert cached == after  # within MEMORY_MAX_AGE, `memory` shows the same census
    assert len(after) <= len(COMPONENTS) + 1 + 12 + 10  # bounded: parts, total, top types


async def test_memory_is_for_the_admin_and_checks_its_arguments(router):
    with trio.fail_after(10):
        control = await open_control(router.control_port)
        assert await control.command("memory") == ["AUTH"]
        await control.command(f"auth {USER}")
        assert await control.command("memory") == ["AUTH"]
        await control.command(f"auth {ADMIN}")
        assert await control.command("memory now please") == ["error: usage: memory [fresh]"]


async def test_a_census_stops_at_its_bound_and_says_so(router):
    async with open_client(router.address) as client:
        await client.create_queue(subscribe=True)
        bounded = await take_census(router.router, max_objects=200, chunk=50)
        full = await take_census(router.router)
    assert not bounded.complete and bounded.objects_walked == 200
    assert full.complete and full.objects_walked > 200
    assert bounded.total < full.total


async def test_the_routers_memory_is_a_gauge_per_component_in_metrics(router):
    with trio.fail_after(30):
        async with open_client(router.address) as client:
            await client.create_queue(subscribe=True)
            got = await scrape(router.metrics_port)
    connections = got[("smp_router_memory_bytes", (("component", "connections"),))]
    subscriptions = got[("smp_router_memory_bytes", (("component", "subscriptions"),))]
    assert connections > 4000 and subscriptions > 0
    assert got[("smp_router_memory_objects", (("component", "queue_table"),))] > 0
    assert got[("smp_router_memory_census_complete", ())] == 1
    assert any(name == "smp_router_memory_type_bytes" for name, _ in got)
    assert got[("smp_router_memory_allocator_bytes",
                (("allocator", "malloc"), ("state", "in_use")))] > 0
