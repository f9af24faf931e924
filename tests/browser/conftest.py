"""Real-browser fixtures: Debian's Chromium driven by Playwright for Python, and
`smp-router gateway` processes on loopback ports.

Chromium is never downloaded: the tests launch /usr/bin/chromium (installed by
scripts/install-test-deps.sh) and fail, not skip, when it is missing.
Screenshots go to $SMP_BROWSER_SCREENSHOTS when set, else to the test's
temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme
from browser_helpers import Gateway

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WEB_ROOT = Path(__file__).resolve().parents[2] / "web"
SMP_ROUTER = Path(sys.executable).with_name("smp-router")
START_TIMEOUT = 30.0


def _start_gateway(*extra: str) -> Gateway:
    command = [str(SMP_ROUTER), "gateway", "--port", "0", "--store", "memory",
               "--log-level", "warning", *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(START_TIMEOUT, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
    finally:
        timer.cancel()
    words = line.split()
    if not line or "serving" not in words:
        process.kill()
        process.wait()
        pytest.fail(f"smp-router gateway did not start: {line!r}")
    return Gateway(words[words.index("serving") + 1], words[words.index("at") + 1],
                   words[words.index("address") + 1], process)


def _stop(gateway: Gateway) -> None:
    gateway.process.terminate()
    try:
        gateway.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        gateway.process.kill()
        gateway.process.wait()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-test-deps.sh (as root)")
    if not (WEB_ROOT / "dist" / "site" / "smp" / "index.js").is_file():
        pytest.fail("web/dist/site is missing: run scripts/install-test-deps.sh "
                    "(npm ci --prefix web builds it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    running = _start_gateway()
    yield running
    _stop(running)


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory) -> Iterator[Gateway]:
    """A gateway with a certificate for 127.0.0.1 from a throwaway CA."""
    directory = tmp_path_factory.mktemp("tls")
    leaf = trustme.CA().issue_cert("127.0.0.1")
    cert, key = directory / "cert.pem", directory / "key.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    running = _start_gateway("--tls-cert", str(cert), "--tls-key", str(key))
    yield running
    _stop(running)


@pytest.fixture
def start_gateway() -> Iterator:
    """Starts gateways with extra options (stopped at the end of the test)."""
    started: list[Gateway] = []

    def start(*extra: str) -> Gateway:
        started.append(_start_gateway(*extra))
        return started[-1]

    yield start
    for running in started:
        _stop(running)


@pytest.fixture
def foreign_site(tmp_path) -> Iterator[tuple[str, Path]]:
    """A plain static web server on another loopback port: another origin.
    Yields its URL and the directory it serves."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", tmp_path
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    directory = Path(os.environ.get("SMP_BROWSER_SCREENSHOTS") or tmp_path / "screens")
    directory.mkdir(parents=True, exist_ok=True)
    return directory
