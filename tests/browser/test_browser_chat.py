"""The demo chat in headless Chromium through `smp-router gateway`: two people in
separate browser contexts, a page that was away, a page of a foreign origin,
and the same chat over https/wss."""

from __future__ import annotations

import re
from pathlib import Path

from browser_helpers import Gateway
from playwright.sync_api import Browser, BrowserContext, Page, expect

TIMEOUT_MS = 15_000


def open_demo(context: BrowserContext, url: str) -> Page:
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    expect(page.locator("#status")).to_have_text("connected", timeout=TIMEOUT_MS)
    return page


def start_conversation(
    browser: Browser, gateway: Gateway, screenshots: Path | None = None, **context_options
):
    """Alice creates an invitation, Bob opens it in another context; both connected."""
    alice_context = browser.new_context(**context_options)
    bob_context = browser.new_context(**context_options)
    alice = open_demo(alice_context, gateway.page_url + "demo/")
    alice.click("#create")
    invitation = alice.locator("#invitation")
    expect(invitation).to_have_value(invitation_link(gateway), timeout=TIMEOUT_MS)
    link = invitation.input_value()
    if screenshots is not None:
        alice.screenshot(path=str(screenshots / "invitation.png"), full_page=True)
    bob = open_demo(bob_context, link)
    for page in (alice, bob):
        expect(page.locator("#peer-status")).to_have_text("connected", timeout=TIMEOUT_MS)
    return alice_context, alice, bob_context, bob


def invitation_link(gateway: Gateway) -> re.Pattern[str]:
    return re.compile("^" + re.escape(gateway.page_url + "demo/") + "#invite=.+")


def send(page: Page, text: str) -> None:
    page.fill("#message", text)
    page.click("#send")


def incoming(page: Page, text: str):
    return page.locator(".message[data-dir='in']").filter(has_text=text)


def outgoing(page: Page, text: str):
    return page.locator(".message[data-dir='out']").filter(has_text=text)


def test_two_pages_in_separate_contexts_chat_through_the_gateway(
    browser: Browser, gateway: Gateway, screenshots: Path
):
    alice_context, alice, bob_context, bob = start_conversation(browser, gateway, screenshots)
    try:
        send(alice, "hello Bob")
        expect(incoming(bob, "hello Bob")).to_have_count(1)
        expect(incoming(bob, "hello Bob")).to_have_attribute("data-state", "received")
        expect(outgoing(alice, "hello Bob")).to_have_attribute("data-state", "delivered")
        send(bob, "hi Alice")
        expect(incoming(alice, "hi Alice")).to_have_count(1)
        expect(outgoing(bob, "hi Alice")).to_have_attribute("data-state", "delivered")
        alice.screenshot(path=str(screenshots / "chat-alice.png"), full_page=True)
        bob.screenshot(path=str(screenshots / "chat-bob.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()


def test_a_page_that_was_away_gets_what_it_missed_exactly_once(
    browser: Browser, gateway: Gateway, screenshots: Path
):
    alice_context, alice, bob_context, bob = start_conversation(browser, gateway)
    try:
        send(alice, "before")
        expect(incoming(bob, "before")).to_have_count(1)
        bob.close()  # Bob's page goes away; his state stays in the context's IndexedDB
        missed = ["missed one", "missed two", "missed three"]
        for text in missed:
            send(alice, text)
            expect(outgoing(alice, text)).to_have_attribute("data-state", "sent")
        bob = open_demo(bob_context, gateway.page_url + "demo/")
        for text in missed:
            expect(incoming(bob, text)).to_have_count(1)
            expect(outgoing(alice, text)).to_have_attribute("data-state", "delivered")
        bob.reload()
        expect(bob.locator("#status")).to_have_text("connected")
        for text in ["before", *missed]:
            expect(incoming(bob, text)).to_have_count(1)
        expect(bob.locator(".message[data-dir='in']")).to_have_count(4)
        bob.screenshot(path=str(screenshots / "chat-after-reload.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()


FOREIGN_PAGE = """<!doctype html><title>foreign</title><pre id="log"></pre><script>
const log = (line) => document.getElementById("log").textContent += line + "\\n";
const ws = new WebSocket("%(smp_url)s");
ws.binaryType = "arraybuffer";
ws.onopen = () => log("ws open");
ws.onclose = (e) => log("ws closed " + e.code);
fetch("%(page_url)shealth").then(() => log("health read"), () => log("health refused"));
import("%(page_url)ssmp/index.js").then(() => log("module loaded"), () => log("module refused"));
</script>"""


def test_a_page_of_a_foreign_origin_is_refused(
    browser: Browser, gateway: Gateway, foreign_site, screenshots: Path
):
    url, directory = foreign_site
    (directory / "index.html").write_text(
        FOREIGN_PAGE % {"smp_url": gateway.smp_url, "page_url": gateway.page_url}
    )
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        console: list[str] = []
        page.on("console", lambda message: console.append(message.text))
        page.goto(url)
        log = page.locator("#log")
        expect(log).to_contain_text("ws closed 1006")
        expect(log).to_contain_text("health refused")
        expect(log).to_contain_text("module refused")
        assert "ws open" not in log.text_content()
        assert any("403" in line for line in console), console
        page.screenshot(path=str(screenshots / "foreign-origin.png"))
    finally:
        context.close()


def test_the_chat_works_over_https_and_wss(
    browser: Browser, tls_gateway: Gateway, screenshots: Path
):
    assert tls_gateway.page_url.startswith("https://")
    assert tls_gateway.smp_url.startswith("wss://")
    alice_context, alice, bob_context, bob = start_conversation(
        browser, tls_gateway, ignore_https_errors=True
    )
    try:
        send(alice, "over TLS")
        expect(incoming(bob, "over TLS")).to_have_count(1)
        expect(outgoing(alice, "over TLS")).to_have_attribute("data-state", "delivered")
        assert alice.evaluate("location.protocol") == "https:"
        alice.screenshot(path=str(screenshots / "chat-tls.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()


EMBEDDING_PAGE = """<!doctype html><title>embedding</title><pre id="log"></pre>
<script type="module">
  import { connect, utf8, fromUtf8, fromBase64url } from "%(page_url)ssmp/index.js";
  const log = (line) => document.getElementById("log").textContent += line + "\\n";
  try {
    const { smpUrl, keyHash } = await (await fetch("%(page_url)sdemo/config.json")).json();
    const client = await connect(smpUrl, fromBase64url(keyHash));
    const queue = await client.createQueue({ sndSecure: false });
    await client.send(queue.senderId, utf8("hello from another origin"));
    await client.subscribe(queue);
    const event = await client.nextEvent();
    log("received: " + fromUtf8(event.body));
    await client.ack(queue, event.msgId);
  } catch (e) {
    log("failed: " + e);
  }
</script>"""


def test_a_page_of_an_allowed_origin_embeds_the_client_module(
    browser: Browser, start_gateway, foreign_site
):
    """README's example: the page lives elsewhere, its origin is on --allow-origin."""
    url, directory = foreign_site
    gateway = start_gateway("--allow-origin", url.rstrip("/"))
    (directory / "index.html").write_text(EMBEDDING_PAGE % {"page_url": gateway.page_url})
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url)
        expect(page.locator("#log")).to_have_text("received: hello from another origin\n")
    finally:
        context.close()


def test_a_second_tab_with_the_invitation_and_a_peer_that_left_are_explained(
    browser: Browser, gateway: Gateway, screenshots: Path
):
    alice_context, alice, bob_context, bob = start_conversation(browser, gateway)
    try:
        # The invitation opened again in Alice's browser: its storage already holds her side.
        link = alice.locator("#invitation").input_value()
        second_tab = open_demo(alice_context, link)
        expect(second_tab.locator("#setup-hint")).to_contain_text("already in a conversation")
        second_tab.close()

        alice.on("dialog", lambda dialog: dialog.accept())
        alice.click("#reset")
        expect(alice.locator("#peer-status")).to_have_text("not connected")
        send(bob, "anyone there?")
        expect(outgoing(bob, "anyone there?")).to_have_attribute("data-state", "failed")
        expect(outgoing(bob, "anyone there?")).to_contain_text("the other side left")
        expect(bob.locator("#peer-status")).to_have_text("left")
        expect(bob.locator("#send")).to_be_disabled()
        bob.screenshot(path=str(screenshots / "chat-peer-left.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()


def test_a_router_with_a_new_identity_at_the_address_asks_for_a_reload(
    browser: Browser, start_gateway
):
    """A gateway on the memory store makes a new identity at each start: the open
    page's key hash is stale, and the client says so instead of staying offline."""
    first = start_gateway()
    port = first.page_url.rstrip("/").rsplit(":", 1)[1]
    context = browser.new_context()
    try:
        page = open_demo(context, first.page_url + "demo/")
        first.process.terminate()
        first.process.wait(timeout=10)
        expect(page.locator("#status")).to_have_text("offline")
        second = start_gateway("--port", port)
        assert second.address != first.address
        expect(page.locator("#setup-hint")).to_contain_text("new identity")
        expect(page.locator("#status")).to_have_text("offline")
        page.reload()
        expect(page.locator("#status")).to_have_text("connected")
    finally:
        context.close()
