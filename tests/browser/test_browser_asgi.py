"""The demo chat through the router inside a Starlette application: the
runnable example examples/asgi_starlette.py (Hypercorn's Trio worker, the
gateway mounted at /chat) in a subprocess, two pages in Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_helpers import Gateway
from playwright.sync_api import Browser, expect
from test_browser_chat import incoming, outgoing, send, start_conversation

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "asgi_starlette.py"


@pytest.fixture(scope="module")
def asgi_example() -> Iterator[Gateway]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=env, cwd=REPO)
    timer = threading.Timer(30, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        words = process.stdout.readline().split()
    finally:
        timer.cancel()
    if "serving" not in words:
        process.kill()
        process.wait()
        pytest.fail(f"{EXAMPLE.name} did not start: {words}")
    chat = words[words.index("at") + 1]  # http://127.0.0.1:PORT/chat/demo/
    address = words[words.index("address") + 1]
    page_url = chat.removesuffix("demo/")
    smp_url = "ws://" + address.split("@", 1)[1]
    yield Gateway(page_url, smp_url, address, process)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_the_demo_chat_works_through_the_asgi_application(
    browser: Browser, asgi_example: Gateway, screenshots: Path
):
    assert asgi_example.page_url.endswith("/chat/")
    assert asgi_example.smp_url.endswith("/chat/smp")
    alice_context, alice, bob_context, bob = start_conversation(browser, asgi_example)
    try:
        send(alice, "hello through Starlette")
        expect(incoming(bob, "hello through Starlette")).to_have_count(1)
        expect(outgoing(alice, "hello through Starlette")).to_have_attribute(
            "data-state", "delivered")
        send(bob, "and back through Hypercorn")
        expect(incoming(alice, "and back through Hypercorn")).to_have_count(1)
        config = alice.evaluate("fetch('config.json').then((r) => r.json())")
        assert config["smpUrl"] == asgi_example.smp_url
        assert config["address"] == asgi_example.address
        alice.screenshot(path=str(screenshots / "asgi-chat-alice.png"), full_page=True)
        bob.screenshot(path=str(screenshots / "asgi-chat-bob.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()
