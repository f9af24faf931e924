"""The upgrade: its deadline, the caps on connections being opened and in total,
the request hook, and suspending the listener; each against the real router."""

from __future__ import annotations

import trio
from edge_helpers import (
    assert_served,
    connect_raw,
    listener,
    read_all,
    read_response_head,
    running_router,
    upgrade_request,
    upgraded,
    wait_closed_by_router,
)
from worker_count import test_workers

from router.server.edge.http import HttpRequest, HttpResponse

ATTACKER = "127.0.0.2"  # another loopback address, so the per-address cap is the attacker's


async def test_connect_and_close_flood_leaves_no_connection_behind():
    async with running_router(upgrade_timeout=30.0) as info:
        edge = listener(info)

        async def connect_and_close(n: int) -> None:
            for _ in range(n):
                stream = await connect_raw(info)
                await stream.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(connect_and_close, 50)
            await assert_served(info)  # during the flood
        # EOF ends the upgrade at once: nothing waits for the 30 s deadline
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        await assert_served(info)


async def test_a_trickled_request_is_dropped_at_the_upgrade_deadline():
    async with running_router(upgrade_timeout=1.0) as info:
        stream = await connect_raw(info)
        request = upgrade_request()

        async def trickle() -> None:
            for byte in request[:-4]:  # never complete
                await stream.send_all(bytes([byte]))
                await trio.sleep(0.05)

        with trio.fail_after(1.0 + 4):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                await wait_closed_by_router(stream)
                nursery.cancel_scope.cancel()
        await assert_served(info)


async def test_connections_being_opened_are_capped_per_address():
    async with running_router(upgrade_timeout=30.0, max_pending_per_address=4) as info:
        edge = listener(info)
        silent = [await connect_raw(info, ATTACKER) for _ in range(4)]
        with trio.fail_after(5):
            while edge.pending < 4:
                await trio.sleep(0.01)
        refused = await connect_raw(info, ATTACKER)
        await refused.send_all(upgrade_request())
        with trio.fail_after(5):
            head = await read_response_head(refused)
        assert head.startswith(b"HTTP/1.1 503"), head
        await assert_served(info)  # another address is not affected
        for stream in silent:
            await stream.aclose()
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        stream = await upgraded(info, ATTACKER)  # the address may open connections again
        await stream.aclose()


async def test_connections_being_opened_are_capped_in_total():
    async with running_router(upgrade_timeout=30.0, max_pending=3) as info:
        edge = listener(info)
        silent = [await connect_raw(info, f"127.0.0.{3 + i}") for i in range(3)]
        with trio.fail_after(5):
            while edge.pending < 3:
                await trio.sleep(0.01)
        refused = await connect_raw(info)
        await refused.send_all(upgrade_request())
        with trio.fail_after(5):
            assert (await read_response_head(refused)).startswith(b"HTTP/1.1 503")
        for stream in silent:
            await stream.aclose()
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        await assert_served(info)


async def test_above_the_connection_cap_a_client_gets_503_and_established_ones_go_on():
    from router.client import open_client

    async with running_router(max_connections=3) as info:
        async with open_client(info.address) as a, open_client(info.address) as b:
            c = await upgraded(info)
            refused = await connect_raw(info)
            await refused.send_all(upgrade_request())
            with trio.fail_after(5):
                assert (await read_response_head(refused)).startswith(b"HTTP/1.1 503")
            await a.ping()
            await b.ping()
            await c.aclose()
            with trio.fail_after(5):
                await listener(info).wait_connections_at_most(2)
            await assert_served(info)


async def test_the_connection_cap_stays_below_the_descriptor_limit():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with running_router(max_connections=10**9) as info:
        edge = listener(info)
        # the router's cap at most its workers' caps together, each below its limit
        assert edge.max_connections <= test_workers() * (soft - edge.limits.fd_headroom)


async def test_plain_http_gets_404_without_an_information_page():
    async with running_router() as info:
        stream = await connect_raw(info)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.fail_after(5):
            assert (await read_response_head(stream)).startswith(b"HTTP/1.1 404")


async def test_the_information_page_answers_get_of_root():
    from router.server import RouterConfig, serve_router

    seen: list[HttpRequest] = []

    def page(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(200, b"router info", "text/html; charset=utf-8")

    async with trio.open_nursery() as nursery:
        info = await nursery.start(
            lambda task_status: serve_router(
                RouterConfig(port=0), info_page=page, task_status=task_status
            )
        )
        stream = await connect_raw(info)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\n\r\n")
        with trio.fail_after(5):
            head, body = (await read_all(stream)).split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"text/html" in head
        assert body == b"router info"
        assert seen[0].target == "/" and seen[0].header("X-TEST") == "yes"
        assert not seen[0].is_websocket_upgrade and seen[0].remote.startswith("127.0.0.1:")
        await assert_served(info)  # upgrades on any path still reach the router
        nursery.cancel_scope.cancel()


async def test_a_bad_request_is_answered_and_closed():
    async with running_router() as info:
        stream = await connect_raw(info)
        no_key = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        await stream.send_all(no_key)
        with trio.fail_after(5):
            head = await read_response_head(stream)
            await wait_closed_by_router(stream)
        assert head.startswith(b"HTTP/1.1 4"), head


async def test_an_oversized_request_head_is_refused():
    async with running_router() as info:
        stream = await connect_raw(info)
        await stream.send_all(b"GET / HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 7000 + b"\r\n")
        await stream.send_all(b"X-Pad2: " + b"a" * 7000 + b"\r\n")
        with trio.fail_after(5):
            head = await read_response_head(stream)
            await wait_closed_by_router(stream)
        assert head.startswith(b"HTTP/1.1 431"), head


async def test_a_suspended_listener_accepts_again_on_resume():
    async with running_router() as info:
        edge = listener(info)
        edge.suspend()
        assert edge.suspended
        stream = await connect_raw(info)  # the kernel completes TCP; nobody reads it
        await stream.send_all(upgrade_request())
        with trio.move_on_after(0.3) as waited:
            await read_response_head(stream)
        assert waited.cancelled_caught
        edge.resume()
        with trio.fail_after(5):
            assert (await read_response_head(stream)).startswith(b"HTTP/1.1 101")
        await assert_served(info)
