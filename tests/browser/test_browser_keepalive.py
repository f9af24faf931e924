"""Keepalive and command timeouts in Chromium against a router that goes
silent without closing anything: the gateway process is stopped (SIGSTOP), so
its sockets stay open and nothing answers."""

from __future__ import annotations

import os
import signal

from browser_helpers import Gateway
from playwright.sync_api import Browser

SILENT_ROUTER = """async ([smpUrl, keyHash]) => {
  const smp = await import("/smp/index.js");
  const client = await smp.connect(smpUrl, smp.fromBase64url(keyHash),
                                   { pingInterval: 300, pingTimeout: 700, commandTimeout: 400 });
  window.__client = client;
  const queue = await client.createQueue({ sndSecure: false });
  window.__queue = queue;
  return "connected";
}"""

WHILE_SILENT = """async () => {
  const smp = await import("/smp/index.js");
  const client = window.__client;
  const started = performance.now();
  const timedOut = await client.get(window.__queue).then(
    () => "answered", (e) => e instanceof smp.CommandTimeout ? "CommandTimeout" : String(e));
  const closed = await client.whenClosed();
  return { timedOut, closed: closed.message, afterMs: performance.now() - started };
}"""


def test_a_silent_router_times_commands_out_and_the_keepalive_drops_it(
    browser: Browser, start_gateway
):
    gateway: Gateway = start_gateway()
    key = gateway.address.removeprefix("smp://").split("@")[0]
    context = browser.new_context()
    stopped = False
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(gateway.page_url + "demo/config.json")
        assert page.evaluate(SILENT_ROUTER, [gateway.smp_url, key]) == "connected"
        os.kill(gateway.process.pid, signal.SIGSTOP)
        stopped = True
        result = page.evaluate(WHILE_SILENT)
        assert result["timedOut"] == "CommandTimeout"
        assert "no answer to PING" in result["closed"], result
        assert result["afterMs"] < 10_000
    finally:
        if stopped:
            os.kill(gateway.process.pid, signal.SIGCONT)
        context.close()
