"""The gateway on a loopback port: SMP through /smp with the embedded router,
the Origin check before the upgrade, TLS, and the `smp-router gateway` command."""

from __future__ import annotations

import json
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio_websocket
import trustme
from worker_count import one_process

from router.client import UpgradeRejected, open_client
from router.gateway.server import GatewayConfig, GatewayInfo, serve_gateway
from router.server import RouterConfig

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
STARTED = re.compile(
    r"^smp-router gateway serving (http://127\.0\.0\.1:(\d+)/) SMP at (ws://127\.0\.0\.1:(\d+)/smp)"
    r" address (smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:(\d+)/smp)\n$"
)


@asynccontextmanager
async def gateway(tmp_path: Path, **router_options) -> AsyncIterator[GatewayInfo]:
    web_root = tmp_path / "web"
    (web_root / "dist" / "site" / "demo").mkdir(parents=True)
    (web_root / "dist" / "site" / "demo" / "index.html").write_text("<title>chat</title>")
    config = GatewayConfig(
        RouterConfig(port=0, store="memory", **router_options), web_root,
        allow_origins=("https://friend.example",),
    )
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_gateway, config)
        nursery.cancel_scope.cancel()


async def http_get(stream: trio.abc.Stream, host: str, target: str) -> tuple[int, bytes]:
    """One GET over `stream`; (status, body) of the answer, which ends the connection."""
    await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_python_client_talks_smp_through_the_gateway_path(tmp_path):
    with trio.fail_after(10):
        async with gateway(tmp_path) as info:
            async with open_client(info.address) as alice, open_client(info.smp_url,
                                                                        info.key_hash) as bob:
                queue = await alice.create_queue(subscribe=True)
                await bob.send(queue.sender_id, b"through the gateway")
                assert (await alice.next_event()).body == b"through the gateway"
            stream = await trio.open_tcp_stream("127.0.0.1", info.port)
            status, body = await http_get(stream, f"127.0.0.1:{info.port}", "/health")
            assert status == 200
            assert json.loads(body)["statistics"]["messages_sent"] == 1


@pytest.mark.parametrize(("origin", "allowed"), [
    ("https://friend.example", True),
    ("http://127.0.0.1:{port}", True),
    ("https://evil.example", False),
    ("http://127.0.0.1:1", False),
])
async def test_the_upgrade_is_refused_with_403_for_a_foreign_origin(tmp_path, origin, allowed):
    with trio.fail_after(10):
        async with gateway(tmp_path) as info:
            headers = [(b"Origin", origin.format(port=info.port).encode())]
            if allowed:
                async with trio_websocket.open_websocket_url(
                    info.smp_url, extra_headers=headers
                ) as ws:
                    assert len(await ws.get_message()) == 16384  # the router's hello
            else:
                with pytest.raises(trio_websocket.ConnectionRejected) as refused:
                    async with trio_websocket.open_websocket_url(
                        info.smp_url, extra_headers=headers
                    ):
                        pass  # pragma: no cover - never reached
                assert refused.value.status_code == 403
            assert info.router.statistics().connections_total == 0  # no SMP session either way


async def test_a_wrong_path_is_a_refused_upgrade_for_the_python_client(tmp_path):
    with trio.fail_after(10):
        async with gateway(tmp_path) as info:
            with pytest.raises(UpgradeRejected) as refused:
                async with open_client(info.smp_url.replace("/smp", "/other"), info.key_hash):
                    pass  # pragma: no cover - never reached
            assert refused.value.status == 404


async def test_with_a_certificate_the_gateway_serves_https_and_wss(tmp_path):
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    with trio.fail_after(10):
        async with gateway(tmp_path, tls_cert=cert, tls_key=key) as info:
            assert info.page_url.startswith("https://") and info.smp_url.startswith("wss://")
            async with open_client(info.address, ssl_context=client_tls) as client:
                await client.ping()
            stream = await trio.open_ssl_over_tcp_stream(
                "127.0.0.1", info.port, ssl_context=client_tls, https_compatible=True
            )
            status, body = await http_get(stream, f"127.0.0.1:{info.port}", "/demo/config.json")
            assert status == 200
            assert json.loads(body)["smpUrl"] == f"wss://127.0.0.1:{info.port}/smp"
            plain = await trio.open_tcp_stream("127.0.0.1", info.port)
            with pytest.raises((trio.BrokenResourceError, ValueError, IndexError)):
                await http_get(plain, "127.0.0.1", "/demo/")  # no plain HTTP on a TLS port


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


async def test_the_gateway_command_prints_one_line_serves_and_stops_on_sigterm(tmp_path):
    command = smp_router("gateway", "--port", "0", "--store", "memory", "--log-level", "warning",
                         "--web-root", str(tmp_path))
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(30):
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, line
                line += chunk
            match = STARTED.match(line.decode())
            assert match is not None, line
            assert match.group(2) == match.group(4) == match.group(6) != "0"
            async with open_client(match.group(5)) as client:
                await client.ping()
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
            assert await process.stdout.receive_some(65536) == b""  # exactly one line
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["--allow-origin", "chat.example"], "--allow-origin"),
    (["--allow-origin", "https://chat.example/app"], "--allow-origin"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "TLS certificate"),
])
def test_a_bad_gateway_option_exits_2_with_one_line(args, message):
    result = subprocess.run(
        smp_router("gateway", "--port", "0", "--store", "memory", *args),
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_half_a_tls_pair_exits_2(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    result = subprocess.run(
        smp_router("gateway", "--port", "0", "--store", "memory", "--tls-cert", str(cert)),
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr


async def test_with_a_data_directory_the_gateway_keeps_its_address_and_messages(tmp_path):
    data_dir = tmp_path / "data"

    async def run(work):
        config = GatewayConfig(RouterConfig(port=0, store="sqlite", data_dir=data_dir),
                               tmp_path)
        async with trio.open_nursery() as nursery:
            info: GatewayInfo = await nursery.start(serve_gateway, config)
            result = await work(info)
            nursery.cancel_scope.cancel()
        return info.key_hash, result

    async def leave_a_message(info: GatewayInfo):
        async with open_client(info.address) as client:
            queue = await client.create_queue()
            await client.send(queue.sender_id, b"kept")
            return queue

    with trio.fail_after(20):
        first_key, queue = await run(leave_a_message)

        async def collect(info: GatewayInfo):
            async with open_client(info.address) as client:
                await client.subscribe(queue)
                return (await client.next_event()).body

        second_key, body = await run(collect)
    assert first_key == second_key and body == b"kept"


async def raw_request(port: int, head: str) -> tuple[int, dict[str, str], bytes]:
    """One request over a fresh connection: (status, headers, body) of the answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head.encode())
        data = b""
        while b"\r\n\r\n" not in data or data.startswith(b"HTTP/1.1 101"):
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
            if data.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in data:
                break
        if not data.startswith(b"HTTP/1.1 101"):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


REBINDING = "rebind.attacker.example"


async def test_a_rebinding_host_name_is_refused_and_health_says_only_ok(tmp_path):
    """A page on a name the attacker's DNS points at the gateway sends that name in both
    Host and Origin: the upgrade and config.json are refused, /health says only ok."""
    with trio.fail_after(10):
        async with gateway(tmp_path) as info:
            host = f"{REBINDING}:{info.port}"
            origin = f"http://{REBINDING}:{info.port}"
            key = "dGhlIHNhbXBsZSBub25jZQ=="
            upgrade, _, _ = await raw_request(info.port, (
                f"GET /smp HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"))
            config, config_headers, _ = await raw_request(info.port, (
                f"GET /demo/config.json HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\r\n"))
            health, _, health_body = await raw_request(
                info.port, f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n")
            assert (upgrade, config) == (421, 421)
            assert "access-control-allow-origin" not in config_headers
            assert (health, json.loads(health_body)) == (200, {"status": "ok"})
            # The names it was started with are answered: its address, and localhost.
            for name in (f"127.0.0.1:{info.port}", f"localhost:{info.port}"):
                status, _, body = await raw_request(
                    info.port, f"GET /health HTTP/1.1\r\nHost: {name}\r\n\r\n")
                assert status == 200 and "statistics" in json.loads(body), name


async def test_an_allowed_host_name_is_answered(tmp_path):
    web_root = tmp_path / "web"
    (web_root / "demo").mkdir(parents=True)
    config = GatewayConfig(RouterConfig(port=0, store="memory"), web_root,
                           allow_hosts=("chat.example",))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            info = await nursery.start(serve_gateway, config)
            status, _, body = await raw_request(
                info.port, f"GET /demo/config.json HTTP/1.1\r\nHost: chat.example:{info.port}"
                "\r\n\r\n")
            assert status == 200 and json.loads(body)["smpUrl"].startswith("ws://chat.example")
            nursery.cancel_scope.cancel()
