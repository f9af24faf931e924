"""tls_client_certs: what asking every TLS client for an optional certificate costs an
ordinary client, in one run (docs/protocol.md#native-tls, #client-service).

    python -m bench tls_client_certs [--handshakes N] [--idle N]

The router's identity TLS is served two ways in one process, each by a fresh
router on 127.0.0.1: Python's `ssl` as before client certificates (no
certificate request), and the pyOpenSSL context the router now uses (a
certificate request on every handshake, the stream driven through memory BIOs).
For each: the time of N sequential connections from TCP connect through TLS and
the SMP handshake to the router's answer to a PING, and the process's RSS
growth per idle connection with `--idle` connections open (client and router
halves both in this process: the same for both ways, so the difference is the
router's); each way in a fresh process of its own. Ratios are pyOpenSSL over
`ssl`.
"""

from __future__ import annotations

import argparse
import gc
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio

from router.protocol.block import pad_block, unpad_block
from router.protocol.codec import encode_command
from router.protocol.handshake import ClientHello, decode_server_hello, encode_client_hello
from router.protocol.transmission import encode_transmission
from router.protocol.types import PING, Transmission
from router.server import RouterConfig, open_router
from router.server.edge.identity import RouterIdentity
from router.server.edge.listener import serve_edge
from router.server.edge.openssl_tls import identity_openssl_context

WAYS = ("ssl", "pyopenssl")
_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")


def python_ssl_identity_context(identity: RouterIdentity) -> ssl.SSLContext:
    """The identity context as it was before client certificates: Python's `ssl`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_TICKET
    context.num_tickets = 0
    pem_chain = "".join(ssl.DER_cert_to_PEM_cert(cert) for cert in identity.chain)
    pem_key = ssl.DER_cert_to_PEM_cert(_PKCS8_ED25519 + identity.online_seed).replace(
        "CERTIFICATE", "PRIVATE KEY"
    )
    with tempfile.TemporaryDirectory() as folder:
        chain_path, key_path = Path(folder) / "chain.pem", Path(folder) / "key.pem"
        chain_path.write_text(pem_chain)
        key_path.write_text(pem_key)
        context.load_cert_chain(chain_path, key_path)
    context.set_alpn_protocols(["smp/1", "http/1.1"])
    return context


def _client_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["smp/1"])
    return context


async def _session(port: int, key_hash: bytes, context: ssl.SSLContext) -> trio.SSLStream:
    """TLS, the SMP handshake at v19 and one PING answered."""
    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), context)
    buffer = b""

    async def block() -> bytes:
        nonlocal buffer
        while len(buffer) < 16384:
            data = await stream.receive_some(65536)
            assert data, "router closed the connection"
            buffer += data
        out, buffer = buffer[:16384], buffer[16384:]
        return out

    await stream.do_handshake()
    decode_server_hello(unpad_block(await block()))
    await stream.send_all(pad_block(encode_client_hello(ClientHello(19, key_hash))))
    ping = encode_transmission(Transmission(b"", b"1", b"", encode_command(PING(), 19)), 19)
    await stream.send_all(pad_block(b"\x01" + len(ping).to_bytes(2, "big") + ping))
    await block()
    return stream


async def _measure(way: str, handshakes: int, idle: int) -> dict[str, float]:
    async with open_router(RouterConfig()) as router:
        context = (identity_openssl_context(router.identity) if way == "pyopenssl"
                   else python_ssl_identity_context(router.identity))
        async with trio.open_nursery() as nursery:
            edge = await nursery.start(lambda task_status: serve_edge(
                router.serve_transport, "127.0.0.1", 0, hook=router.request_hook,
                limits=router.config.edge_limits(), identity_tls=context,  # type: ignore[arg-type]
                task_status=task_status,
            ))
            client = _client_context()
            start = time.perf_counter()
            for _ in range(handshakes):
                await trio.aclose_forcefully(await _session(edge.port, router.key_hash, client))
            handshake = (time.perf_counter() - start) / handshakes
            gc.collect()
            before = psutil.Process().memory_info().rss
            streams = [await _session(edge.port, router.key_hash, client) for _ in range(idle)]
            gc.collect()
            per_connection = (psutil.Process().memory_info().rss - before) / idle
            for stream in streams:
                await trio.aclose_forcefully(stream)
            nursery.cancel_scope.cancel()
    return {"handshake_ms": handshake * 1000, "idle_rss_bytes": per_connection}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench tls_client_certs")
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--way", choices=WAYS, help="measure one way here (the child process)")
    args = parser.parse_args(argv)
    if args.way is not None:
        print(json.dumps(trio.run(_measure, args.way, args.handshakes, args.idle)))
        return 0
    figures = {}
    for way in WAYS:  # a fresh process each: neither inherits the other's heap
        child = subprocess.run(
            [sys.executable, "-m", "bench.tls_client_certs", "--way", way,
             "--handshakes", str(args.handshakes), "--idle", str(args.idle)],
            check=True, capture_output=True, text=True,
        )
        figures[way] = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"{args.handshakes} handshakes, {args.idle} idle connections, one run")
    print("| figure | Python ssl (before) | pyOpenSSL (after) | after / before |")
    print("|---|---|---|---|")
    for key in ("handshake_ms", "idle_rss_bytes"):
        a, b = figures["ssl"][key], figures["pyopenssl"][key]
        # a few idle connections may not move the RSS by a page: no ratio then
        print(f"| {key} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
