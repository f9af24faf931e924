"""The demo chat is end-to-end encrypted: what the router stores for a chat
message is ciphertext. Another client holding the recipient's queue keys (as
the router does: it sees every SEND body) GETs the waiting message and cannot
read it; the recipient's page, with the key from the invitation, can."""

from __future__ import annotations

import html
import json
from pathlib import Path

from browser_helpers import Gateway
from playwright.sync_api import Browser, expect
from test_browser_chat import TIMEOUT_MS, incoming, open_demo, outgoing, send, start_conversation

SECRET = "the gate code is 4711"

# In a page of the gateway's origin in Bob's browser context: Bob's queue keys
# from the demo's IndexedDB, then GET of the waiting message on a connection of
# its own, without ACK (the message stays for Bob).
GET_AS_ANOTHER_CLIENT = """async (secret) => {
  const request = (r) => new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
  const db = await request(indexedDB.open("smp-demo"));
  const state = await request(db.transaction("kv").objectStore("kv").get("demo/state"));
  db.close();
  const smp = await import("/smp/index.js");
  const config = await (await fetch("/demo/config.json")).json();
  const client = await smp.connect(config.smpUrl, smp.fromBase64url(config.keyHash));
  const event = await client.get(state.myQueue);
  client.close();
  const body = event.body;
  const asText = new TextDecoder("utf-8", {fatal: false}).decode(body);
  return {
    type: event.type,
    length: body.length,
    first: body[0],
    hex: smp.toHex(body),
    containsSecret: asText.includes(secret),
    containsJson: asText.includes('"t"') || asText.includes("msg"),
    recipientId: smp.toBase64url(state.myQueue.recipientId),
  };
}"""

ROUTER_VIEW = """<!doctype html><meta charset="utf-8"><title>What the router stores</title>
<style>
 body {{ font: 15px system-ui, sans-serif; margin: 24px; color: #1c2430; background: #f3f5f8; }}
 .card {{ background: #fff; border-radius: 10px; padding: 16px 20px; margin-bottom: 16px;
         box-shadow: 0 1px 3px rgba(0,0,0,.1); max-width: 980px; }}
 h1 {{ font-size: 20px; }} code, pre {{ font: 12px ui-monospace, monospace; }}
 pre {{ white-space: pre-wrap; word-break: break-all; background: #0f1720; color: #9fe3b0;
       padding: 12px; border-radius: 8px; max-height: 260px; overflow: hidden; }}
 .no {{ color: #b42318; font-weight: 600; }} .yes {{ color: #067647; font-weight: 600; }}
</style>
<h1>GET by another client of Bob's queue</h1>
<div class="card">
 <p>Alice sent: <b>{secret}</b></p>
 <p>Queue <code>{queue}</code>: GET answered <code>{type}</code>, a body of {length} bytes
 (the SEND body as the router stored it; its per-queue layer already removed).</p>
 <p>Envelope kind: <code>0x{first:02x}</code> (0x02: a NaCl box between the two pages)</p>
 <p>Readable in it: the text <span class="no">{secret_seen}</span>,
 any JSON of the chat <span class="no">{json_seen}</span></p>
 <pre>{hex}</pre>
</div>"""


def test_the_router_stores_only_ciphertext_of_the_demo_chat(
    browser: Browser, gateway: Gateway, screenshots: Path
):
    alice_context, alice, bob_context, bob = start_conversation(browser, gateway)
    try:
        send(alice, "hello before")
        expect(incoming(bob, "hello before")).to_have_count(1)
        bob.close()  # Bob is away: Alice's next message waits in his queue on the router
        send(alice, SECRET)
        expect(outgoing(alice, SECRET)).to_have_attribute("data-state", "sent")

        spy = bob_context.new_page()
        spy.set_default_timeout(TIMEOUT_MS)
        spy.goto(gateway.page_url + "demo/config.json")  # the gateway's origin: Bob's IndexedDB
        seen = spy.evaluate(GET_AS_ANOTHER_CLIENT, SECRET)
        assert seen["type"] == "message", seen
        assert not seen["containsSecret"] and not seen["containsJson"], seen
        assert seen["first"] == 0x02  # a message envelope: kind, nonce (24), box (MAC 16 + padded)
        assert (seen["length"] - 1 - 24 - 16) % 256 == 0, seen["length"]
        spy.set_content(ROUTER_VIEW.format(
            secret=html.escape(SECRET), queue=seen["recipientId"], type="MSG",
            length=seen["length"], first=seen["first"],
            secret_seen="no" if not seen["containsSecret"] else "YES",
            json_seen="no" if not seen["containsJson"] else "YES",
            hex=" ".join(seen["hex"][i:i + 2] for i in range(0, len(seen["hex"]), 2)),
        ))
        spy.screenshot(path=str(screenshots / "e2e-router-view.png"), full_page=True)
        spy.close()

        # The same stored body opens on Bob's page, with the key from the invitation.
        bob = open_demo(bob_context, gateway.page_url + "demo/")
        expect(incoming(bob, SECRET)).to_have_count(1)
        expect(outgoing(alice, SECRET)).to_have_attribute("data-state", "delivered")
        expect(bob.locator("#setup-hint")).to_contain_text("end-to-end encrypted")
        bob.screenshot(path=str(screenshots / "e2e-bob-reads-it.png"), full_page=True)
        alice.screenshot(path=str(screenshots / "e2e-alice.png"), full_page=True)
    finally:
        alice_context.close()
        bob_context.close()


def test_an_invitation_carries_the_inviter_public_key_in_its_fragment(
    browser: Browser, gateway: Gateway
):
    import base64

    context = browser.new_context()
    try:
        alice = open_demo(context, gateway.page_url + "demo/")
        alice.click("#create")
        invitation = alice.locator("#invitation")
        expect(invitation).not_to_have_value("")
        link = invitation.input_value()
        fragment = link.split("#invite=", 1)[1]
        invite = json.loads(base64.urlsafe_b64decode(fragment + "=" * (-len(fragment) % 4)))
        assert set(invite) == {"v", "q", "k", "u", "e"}
        assert len(base64.urlsafe_b64decode(invite["e"] + "=" * (-len(invite["e"]) % 4))) == 32
    finally:
        context.close()
