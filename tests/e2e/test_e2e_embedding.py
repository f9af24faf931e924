"""The embedding example runs: a gateway hands its own WebSockets to the router."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import trio
import trio_websocket

from router.client import open_client
from router.server import RouterConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedded_gateway.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embedded_gateway", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("embedded_gateway", module)
    spec.loader.exec_module(module)
    return module


async def http_get(host: str, port: int) -> tuple[bytes, bytes]:
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


async def test_the_gateway_example_serves_smp_statistics_and_health(nursery, delivery):
    gateway = load_example()
    config = RouterConfig(port=0, delivery=delivery)
    with trio.fail_after(10):
        info = await nursery.start(gateway.run_gateway, "127.0.0.1", 0, 0, config)
        async with open_client(info.smp_url, key_hash=info.key_hash) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"through the gateway")
            assert (await client.next_event()).body == b"through the gateway"
            async with trio_websocket.open_websocket_url(info.stats_url) as ws:
                stats = json.loads(await ws.get_message())
            assert stats["queues_created"] == 1 and stats["connections"] == 1
        port = int(info.health_url.rsplit(":", 1)[1].strip("/"))
        head, body = await http_get("127.0.0.1", port)
        assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["status"] == "ok"
        # The printed address is the one clients take: the key hash in base64url.
        assert info.address.startswith("smp://") and info.address.endswith(info.smp_url[5:])
        async with open_client(info.address) as by_address:
            await by_address.ping()
        with pytest.raises(trio_websocket.ConnectionRejected):
            async with trio_websocket.open_websocket_url(info.smp_url.replace("/smp", "/nope")):
                pass
