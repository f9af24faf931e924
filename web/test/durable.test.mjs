// The durable subscription's de-duplication, against a stand-in agent: a
// redelivered message is ACKed without being handed over, across a "reload"
// (a new subscription on the same store), and a failed handler gets it again.

import assert from "node:assert/strict";
import { test } from "node:test";

import { DurableSubscription, MemoryStore, crypto, utf8 } from "../smp/index.js";

class StandInAgent {
  constructor() {
    this.listeners = new Set();
    this.acks = [];
    this.queues = [];
  }
  onEvent(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
  addQueue(q) {
    this.queues.push(q);
  }
  removeQueue() {}
  async ack(event) {
    this.acks.push(event.msgId);
    return true;
  }
  deliver(event) {
    for (const fn of this.listeners) fn(event);
  }
}

const queue = { recipientId: Uint8Array.of(1, 2, 3), senderId: Uint8Array.of(4) };
const message = (msgId, text) => ({
  type: "message", recipientId: queue.recipientId, msgId, ts: 1, flags: utf8("F"), body: utf8(text), quota: false, queue,
});

test("a message comes to the handler once, across a reload, and is ACKed each time", async () => {
  const store = new MemoryStore();
  const agent = new StandInAgent();
  const handled = [];
  const first = new DurableSubscription(agent, store, async (m) => handled.push(new TextDecoder().decode(m.body)));
  await first.addQueue(queue);
  const id1 = crypto.randomBytes(24);
  agent.deliver(message(id1, "one"));
  agent.deliver(message(id1, "one"));
  await first.idle();
  first.close();

  const reloaded = new DurableSubscription(agent, store, async (m) => handled.push(new TextDecoder().decode(m.body)));
  const restored = await reloaded.restore();
  assert.deepEqual(restored.map((q) => q.recipientId), [queue.recipientId]);
  agent.deliver(message(id1, "one"));
  agent.deliver(message(crypto.randomBytes(24), "two"));
  await reloaded.idle();

  assert.deepEqual(handled, ["one", "two"]);
  assert.equal(agent.acks.length, 4);
  assert.deepEqual(reloaded.stats.duplicates, 1);
});

test("a handler that throws leaves the message unacknowledged, and it is handed over when it comes again", async () => {
  const agent = new StandInAgent();
  let fail = true;
  const handled = [];
  const sub = new DurableSubscription(agent, new MemoryStore(), async (m) => {
    if (fail) throw new Error("not now");
    handled.push(m.msgId);
  });
  const id = crypto.randomBytes(24);
  agent.deliver(message(id, "x"));
  await sub.idle();
  assert.deepEqual(agent.acks, []);
  assert.equal(sub.stats.handlerErrors, 1);
  fail = false;
  agent.deliver(message(id, "x"));
  await sub.idle();
  assert.deepEqual(handled, [id]);
  assert.deepEqual(agent.acks, [id]);
});

test("quota markers and undecryptable messages are ACKed and not handed over", async () => {
  const agent = new StandInAgent();
  const handled = [];
  const sub = new DurableSubscription(agent, new MemoryStore(), async (m) => handled.push(m));
  agent.deliver({ ...message(crypto.randomBytes(24), ""), quota: true });
  agent.deliver({ type: "undecrypted", recipientId: queue.recipientId, msgId: crypto.randomBytes(24), queue });
  await sub.idle();
  assert.equal(handled.length, 0);
  assert.equal(agent.acks.length, 2);
  assert.deepEqual([sub.stats.quotaMarkers, sub.stats.undecryptable], [1, 1]);
});
