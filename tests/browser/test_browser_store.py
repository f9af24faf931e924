"""IndexedDBStore in headless Chromium: what a page stored is there after a reload,
and the durable subscription's de-duplication by msgId holds across it.

The page is a blank document at the gateway's origin (so that `/smp/` imports
as the demo's do) and the agent is a stand-in the page drives: the test is about
the browser's storage, the router's side is covered by the chat tests.
"""

from __future__ import annotations

import secrets

from browser_helpers import Gateway
from playwright.sync_api import Browser, Page, Route

TIMEOUT_MS = 15_000
BLANK_PAGE = "store-test.html"

# Defined on `window` of each page load: the client's modules, a stand-in agent
# that delivers what the test hands it, and a subscription whose handler writes
# what it was given in the same transaction as the msgId record.
SETUP = """async (dbName) => {
  const smp = await import("/smp/index.js");
  const store = await smp.IndexedDBStore.open(dbName);
  const agent = {
    listeners: new Set(), acks: [],
    onEvent(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); },
    addQueue() {}, removeQueue() {},
    async ack(event) { this.acks.push(smp.toHex(event.msgId)); return true; },
  };
  const subscription = new smp.DurableSubscription(agent, store, async (message) => {
    const text = new TextDecoder().decode(message.body);
    const handled = (await store.get("app/handled")) ?? [];
    await store.putMany([["app/handled", [...handled, text]], message.seenEntry]);
    return true;
  });
  const queue = {
    recipientId: Uint8Array.of(7, 7, 7), senderId: Uint8Array.of(1),
    rcvAuthSeed: new Uint8Array(32).fill(9),
  };
  const deliver = async (msgIdHex, text) => {
    const event = {
      type: "message", recipientId: queue.recipientId, msgId: smp.fromHex(msgIdHex), ts: 1,
      flags: smp.utf8("F"), body: smp.utf8(text), quota: false, queue,
    };
    for (const fn of agent.listeners) fn(event);
    await subscription.idle();
  };
  Object.assign(window, { smp, store, agent, subscription, queue, deliver });
}"""


def load_client(page: Page, db_name: str) -> None:
    """The client's modules, the store `db_name` and a subscription on it, in this page load."""
    page.evaluate(SETUP, db_name)


def serve_blank(page: Page, gateway: Gateway) -> None:
    """A blank document at the gateway's origin; everything else comes from the gateway."""

    def fulfil(route: Route) -> None:
        route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>store</title>"
        )

    page.route(gateway.page_url + BLANK_PAGE, fulfil)
    page.goto(gateway.page_url + BLANK_PAGE)


def test_indexeddb_records_and_msgid_dedup_survive_a_reload(browser: Browser, gateway: Gateway):
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        serve_blank(page, gateway)
        db_name = f"store-test-{secrets.token_hex(4)}"
        first_id, second_id = secrets.token_hex(24), secrets.token_hex(24)

        load_client(page, db_name)
        page.evaluate(
            """async ([first, second]) => {
              await subscription.addQueue(queue);
              await store.put("app/bytes", Uint8Array.of(1, 2, 255));
              await deliver(first, "one");
              await deliver(first, "one");   // the ACK was lost: the router sends it again
              await deliver(second, "two");
            }""",
            [first_id, second_id],
        )
        before = page.evaluate("() => ({stats: subscription.stats, acks: agent.acks})")
        assert before["stats"]["delivered"] == 2 and before["stats"]["duplicates"] == 1
        assert before["acks"] == [first_id, first_id, second_id]

        page.reload()
        load_client(page, db_name)
        after = page.evaluate(
            """async ([first, second]) => {
              const restored = await subscription.restore();
              const bytes = await store.get("app/bytes");
              // Both again after the reload (the ACKs were lost), then a new one.
              await deliver(first, "one");
              await deliver(second, "two");
              await deliver(smp.toHex(smp.crypto.randomBytes(24)), "three");
              return {
                restored: restored.map((q) => smp.toHex(q.recipientId)),
                bytes: bytes instanceof Uint8Array ? [...bytes] : String(bytes),
                handled: await store.get("app/handled"),
                keys: await store.keys("app/"),
                stats: subscription.stats,
                acks: agent.acks.length,
              };
            }""",
            [first_id, second_id],
        )
        assert after["restored"] == ["070707"]
        assert after["bytes"] == [1, 2, 255]
        assert after["handled"] == ["one", "two", "three"], "each message handed over once"
        assert after["keys"] == ["app/bytes", "app/handled"]
        assert after["stats"]["duplicates"] == 2 and after["stats"]["delivered"] == 1
        assert after["acks"] == 3, "duplicates are acknowledged too"
    finally:
        context.close()


def test_indexeddb_put_many_writes_all_or_nothing(browser: Browser, gateway: Gateway):
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        serve_blank(page, gateway)
        load_client(page, f"store-test-{secrets.token_hex(4)}")
        result = page.evaluate(
            """async () => {
              await store.put("k/a", "old");
              let error = null;
              try {
                // A function cannot be stored: the whole batch must fail, "k/a" keeps its value.
                await store.putMany([["k/a", "new"], ["k/b", () => 1]]);
              } catch (e) {
                error = e.name;
              }
              return { error, a: await store.get("k/a"), keys: await store.keys("k/") };
            }"""
        )
        assert result == {"error": "DataCloneError", "a": "old", "keys": ["k/a"]}
    finally:
        context.close()
