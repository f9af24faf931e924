// Drives the web client from another program, for the cross-language tests
// (tests/web/): one JSON request per line on stdin, one JSON answer per line
// on stdout, {id, ok: true, result} or {id, ok: false, error: {name, type, message}}.
// Bytes travel as hex. Clients, queues, stores and durable subscriptions are
// kept under names the caller chooses.

import { createInterface } from "node:readline";

import {
  Backoff, DurableSubscription, MemoryStore, SMPAgent, connect, crypto,
  fromHex, fromUtf8, toHex, utf8,
} from "../smp/index.js";

const clients = new Map();
const queues = new Map();
const stores = new Map();
const durables = new Map();
const notifiers = new Map(); // by the name of their queue

const hexFields = (obj) =>
  Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, v instanceof Uint8Array ? toHex(v) : v]));

const QUEUE_BYTES = ["recipientId", "senderId", "rcvAuthSeed", "rcvAuthKey", "rcvDhPriv", "srvDhKey", "boxKey"];

function queueFrom(fields) {
  const q = { sndSecure: fields.sndSecure };
  for (const k of QUEUE_BYTES) q[k] = fromHex(fields[k]);
  return q;
}

function eventView(ev) {
  const out = { type: ev.type };
  for (const [k, v] of Object.entries(ev)) {
    if (k === "client" || k === "queue") continue;
    out[k] = v instanceof Uint8Array ? toHex(v) : v;
  }
  if (ev.type === "message") {
    try {
      out.text = fromUtf8(ev.body);
    } catch {
      out.text = null;
    }
  }
  return out;
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const client = (name) => {
  const c = clients.get(name);
  if (!c) throw new Error(`no client ${name}`);
  return c;
};
const queue = (name) => {
  const q = queues.get(name);
  if (!q) throw new Error(`no queue ${name}`);
  return q;
};
const body = (a) => (a.hex !== undefined ? fromHex(a.hex) : utf8(a.text));

/** A durable subscription whose handled messages wait in a list for `durableNext`. */
class DurableUnderTest {
  constructor(a) {
    this.handled = [];
    this.waiters = [];
    this.statuses = [];
    this.closeAfterHandling = Boolean(a.closeAfterHandling);
    if (!stores.has(a.store)) stores.set(a.store, new MemoryStore());
    this.agent = new SMPAgent({
      url: a.url,
      keyHash: fromHex(a.keyHash),
      backoff: new Backoff({ initial: a.backoffMs ?? 50, maximum: (a.backoffMs ?? 50) * 4 }),
    });
    this.agent.onEvent((ev) => {
      if (ev.type === "status") this.statuses.push(ev.status);
    });
    this.sub = new DurableSubscription(this.agent, stores.get(a.store), (m) => this.handle(m));
  }

  async handle(m) {
    this.handled.push({ recipientId: toHex(m.recipientId), msgId: toHex(m.msgId), text: fromUtf8(m.body) });
    for (const w of this.waiters.splice(0)) w();
    // Stands for a page closed right after handling, before its ACK went out.
    if (this.closeAfterHandling) this.agent.client?.close();
  }

  async next(index, ms) {
    const deadline = Date.now() + ms;
    while (this.handled.length <= index) {
      if (Date.now() > deadline) throw new Error(`timeout waiting for message ${index}`);
      await withTimeout(new Promise((resolve) => this.waiters.push(resolve)), ms, `message ${index}`);
    }
    return this.handled[index];
  }
}

const OPS = {
  async connect(a) {
    const options = a.versions ? { versions: a.versions } : {};
    const c = await connect(a.url, fromHex(a.keyHash), options);
    clients.set(a.client, c);
    return { version: c.version, sessionId: toHex(c.sessionId) };
  },
  async close(a) {
    client(a.client).close();
    return null;
  },
  async create(a) {
    const q = await client(a.client).createQueue({ sndSecure: a.sndSecure ?? true, subscribe: a.subscribe ?? false });
    queues.set(a.queue, q);
    return hexFields(q);
  },
  async addQueue(a) {
    const q = queueFrom(a.fields);
    queues.set(a.queue, q);
    client(a.client).addQueue(q);
    return null;
  },
  async newSigner() {
    const k = crypto.newEd25519();
    return { seed: toHex(k.seed), key: toHex(k.publicKey) };
  },
  async subscribe(a) {
    await client(a.client).subscribe(queue(a.queue));
    return null;
  },
  async ack(a) {
    await client(a.client).ack(queue(a.queue), fromHex(a.msgId));
    return null;
  },
  async get(a) {
    const ev = await client(a.client).get(queue(a.queue));
    return ev && eventView(ev);
  },
  async secure(a) {
    await client(a.client).secureQueue(queue(a.queue), fromHex(a.senderKey));
    return null;
  },
  async skey(a) {
    await client(a.client).secureSender(fromHex(a.senderId), fromHex(a.seed), fromHex(a.key));
    return null;
  },
  async send(a) {
    const senderSeed = a.seed ? fromHex(a.seed) : null;
    await client(a.client).send(fromHex(a.senderId), body(a), { senderSeed, notify: Boolean(a.notify) });
    return null;
  },
  async suspend(a) {
    await client(a.client).suspend(queue(a.queue));
    return null;
  },
  async delete(a) {
    await client(a.client).delete(queue(a.queue));
    return null;
  },
  async enableNotifications(a) {
    const creds = await client(a.client).enableNotifications(queue(a.queue));
    notifiers.set(a.queue, creds);
    return hexFields(creds);
  },
  async subscribeNotifications(a) {
    await client(a.client).subscribeNotifications(notifiers.get(a.queue));
    return null;
  },
  async disableNotifications(a) {
    await client(a.client).disableNotifications(queue(a.queue));
    return null;
  },
  /** Any command bytes, signed with a queue's recipient key if `signWith` names one. */
  async raw(a) {
    const seed = a.signWith ? queue(a.signWith).rcvAuthSeed : a.seed ? fromHex(a.seed) : null;
    const r = await client(a.client).command(fromHex(a.entityId ?? ""), fromHex(a.command), seed);
    return r.type === "ERR" ? { type: "ERR", error: r.error } : { type: r.type };
  },
  async rawBlock(a) {
    client(a.client).sendRawBlock(fromHex(a.hex));
    return null;
  },
  async event(a) {
    const ev = await withTimeout(client(a.client).nextEvent(), a.timeoutMs ?? 10000, "an event");
    return eventView(ev);
  },
  /** Whether an event is waiting, after a PING round trip (the router answers in order). */
  async noEvent(a) {
    const c = client(a.client);
    await c.ping();
    const ev = c.nextEventNow();
    return ev ? eventView(ev) : null;
  },
  async closed(a) {
    const error = await withTimeout(client(a.client).whenClosed(), a.timeoutMs ?? 10000, "the close");
    return { name: error.name, message: error.message };
  },
  async durableStart(a) {
    const d = new DurableUnderTest(a);
    durables.set(a.durable, d);
    const restored = await d.sub.restore();
    d.agent.start();
    await withTimeout(d.agent.connected(), a.timeoutMs ?? 10000, "a connection");
    return { restored: restored.map((q) => toHex(q.recipientId)) };
  },
  async durableAdd(a) {
    await durables.get(a.durable).sub.addQueue(queue(a.queue));
    return null;
  },
  async durableNext(a) {
    return durables.get(a.durable).next(a.index, a.timeoutMs ?? 10000);
  },
  async durableConnected(a) {
    const d = durables.get(a.durable);
    await withTimeout(d.agent.connected(), a.timeoutMs ?? 10000, "a connection");
    return { statuses: d.statuses };
  },
  async durableState(a) {
    const d = durables.get(a.durable);
    await d.sub.idle();
    return { handled: d.handled, stats: d.sub.stats, statuses: d.statuses, status: d.agent.status };
  },
  async durableStop(a) {
    const d = durables.get(a.durable);
    await d.agent.stop();
    d.sub.close();
    durables.delete(a.durable);
    return { handled: d.handled, stats: d.sub.stats };
  },
};

function errorView(e) {
  return { name: e?.name ?? "Error", type: e?.type ?? null, message: String(e?.message ?? e) };
}

const lines = createInterface({ input: process.stdin });
lines.on("line", async (line) => {
  if (!line.trim()) return;
  let request;
  try {
    request = JSON.parse(line);
  } catch (e) {
    process.stdout.write(`${JSON.stringify({ id: null, ok: false, error: errorView(e) })}\n`);
    return;
  }
  const { id, op, ...args } = request;
  let answer;
  try {
    if (!Object.hasOwn(OPS, op)) throw new Error(`unknown op ${op}`);
    answer = { id, ok: true, result: await OPS[op](args) };
  } catch (e) {
    answer = { id, ok: false, error: errorView(e) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
});
lines.on("close", () => {
  for (const c of clients.values()) c.close();
  Promise.all([...durables.values()].map((d) => d.agent.stop())).finally(() => process.exit(0));
});
