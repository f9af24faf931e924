// SMPClient and SMPAgent against a scripted router behind a stand-in WebSocket:
// batching, correlation, pushes, typed errors, closing, reconnection.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import * as signing from "../smp/signing.js";
import {
  Backoff, CommandTimeout, ConnectionClosed, HandshakeError, IdentityMismatch, SMPAgent, SMPError, concat, connect,
  crypto, decodeBatch,
  decodeClientHello, decodeCommand, decodeTransmission, encodeBatches, encodeResponse,
  encodeServerHello, encodeTransmission, latin1, padBlock, unpadBlock, utf8,
} from "../smp/index.js";

const EMPTY = new Uint8Array(0);
const KEY_HASH = new Uint8Array(32).fill(7);

/**
 * A WebSocket whose other end is `router(fake)`: the router sees each block the
 * client sends (`fake.received`) and answers with `fake.push(...)`.
 */
function fakeSocketClass(script) {
  const sockets = [];
  class FakeWebSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.onBlock = null;
      sockets.push(this);
      queueMicrotask(() => script(this, sockets.length - 1));
    }
    /** Open and send the router hello: the fields, or its content as bytes. */
    open(hello = { minVersion: 9, maxVersion: 10, sessionId: new Uint8Array(32).fill(1) }) {
      this.readyState = 1;
      this.deliver(padBlock(hello instanceof Uint8Array ? hello : encodeServerHello(hello)));
    }
    deliver(block) {
      const copy = block.slice();
      queueMicrotask(() => this.onmessage?.({ data: copy.buffer }));
    }
    /** Answer transmissions: [corrId, entityId, response] each. */
    push(...answers) {
      const ts = answers.map(([corrId, entityId, r]) =>
        encodeTransmission({ authorization: EMPTY, corrId, entityId, command: r instanceof Uint8Array ? r : encodeResponse(r) }));
      for (const block of encodeBatches(ts)) this.deliver(block);
    }
    send(data) {
      this.sent.push(data);
      if (this.sent.length === 1) {
        this.hello = decodeClientHello(unpadBlock(data));
        this.onHello?.(this.hello);
        return;
      }
      const ts = decodeBatch(data).map(decodeTransmission).map((t) => ({ ...t, cmd: decodeCommand(t.command) }));
      this.onBlock?.(ts);
    }
    close(code = 1000, reason = "") {
      if (this.readyState === 3) return;
      this.readyState = 3;
      queueMicrotask(() => this.onclose?.({ code, reason }));
    }
  }
  return { FakeWebSocket, sockets };
}

/** A router that answers PING with PONG and hands everything else to `answer`. */
function pingingRouter(answer = () => {}, hello = undefined) {
  return (ws) => {
    ws.onBlock = (ts) => {
      const pings = ts.filter((t) => t.cmd.type === "PING");
      if (pings.length) ws.push(...pings.map((t) => [t.corrId, EMPTY, { type: "PONG" }]));
      const rest = ts.filter((t) => t.cmd.type !== "PING");
      if (rest.length) answer(ws, rest);
    };
    ws.open(hello);
  };
}

describe("SMPClient", () => {
  test("the hello names the router's key hash; commands of one turn share one block", async () => {
    const blocks = [];
    const { FakeWebSocket, sockets } = fakeSocketClass(pingingRouter((ws, ts) => {
      blocks.push(ts.map((t) => t.cmd.type));
      // Answered in reverse order: each caller still gets its own answer.
      ws.push(...ts.reverse().map((t) => [t.corrId, t.entityId, { type: "ERR", error: `CMD ${t.cmd.type === "OFF" ? "PROHIBITED" : "SYNTAX"}` }]));
    }));
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket });
    assert.deepEqual(sockets[0].hello.keyHash, KEY_HASH);
    assert.equal(client.version, 10);
    const queue = { recipientId: Uint8Array.of(1), rcvAuthSeed: crypto.randomBytes(32) };
    const results = await Promise.allSettled([client.suspend(queue), client.delete(queue), client.get(queue)]);
    assert.deepEqual(blocks, [["OFF", "DEL", "GET"]]);
    assert.deepEqual(results.map((r) => r.reason.type), ["CMD PROHIBITED", "CMD SYNTAX", "CMD SYNTAX"]);
    assert.ok(results.every((r) => r.reason instanceof SMPError));
    client.close();
  });

  test("a pushed MSG is decrypted with its queue's key; END and DELD are events", async () => {
    let ws;
    const { FakeWebSocket } = fakeSocketClass(pingingRouter());
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket, confirm: false });
    const routerDh = crypto.newX25519();
    const mine = crypto.newX25519();
    const queue = { recipientId: Uint8Array.of(9), boxKey: crypto.boxKey(mine.privateKey, routerDh.publicKey) };
    client.addQueue(queue);
    const msgId = crypto.randomBytes(24);
    const encBody = crypto.encryptMsgBody(crypto.boxKey(routerDh.privateKey, mine.publicKey), msgId, 77, latin1("F"), utf8("pushed"));
    ws = client.socket.ws;
    ws.push([EMPTY, queue.recipientId, { type: "MSG", msgId, encBody }], [EMPTY, Uint8Array.of(5), { type: "END" }], [EMPTY, Uint8Array.of(6), { type: "DELD" }]);
    const m = await client.nextEvent();
    assert.deepEqual([m.type, new TextDecoder().decode(m.body), m.ts, m.quota], ["message", "pushed", 77, false]);
    assert.deepEqual(await client.nextEvent(), { type: "end", recipientId: Uint8Array.of(5) });
    assert.deepEqual(await client.nextEvent(), { type: "deleted", recipientId: Uint8Array.of(6) });
    // A MSG for a queue this client does not know is handed on sealed.
    ws.push([EMPTY, Uint8Array.of(8), { type: "MSG", msgId, encBody }]);
    assert.equal((await client.nextEvent()).type, "undecrypted");
    client.close();
  });

  test("a closed connection fails every waiting call, and later ones, with ConnectionClosed", async () => {
    const { FakeWebSocket } = fakeSocketClass(pingingRouter((ws) => ws.close(1011, "gone")));
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket });
    const waiting = client.nextEvent();
    await assert.rejects(client.send(Uint8Array.of(1), utf8("x")), (e) => e instanceof ConnectionClosed && /1011: gone/.test(e.message));
    await assert.rejects(waiting, ConnectionClosed);
    await assert.rejects(client.ping(), ConnectionClosed);
    assert.ok((await client.whenClosed()) instanceof ConnectionClosed);
  });

  test("a message that is not one block, or a bad batch, ends the connection", async () => {
    for (const bad of [new Uint8Array(100), padBlock(Uint8Array.of(0))]) {
      const { FakeWebSocket } = fakeSocketClass(pingingRouter((ws) => ws.deliver(bad)));
      const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket });
      await assert.rejects(client.ping().then(() => client.suspend({ recipientId: Uint8Array.of(1), rcvAuthSeed: crypto.randomBytes(32) })), ConnectionClosed);
    }
  });

  test("a transmission too large for a block is refused locally with LARGE_MSG", async () => {
    const { FakeWebSocket, sockets } = fakeSocketClass(pingingRouter());
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket });
    await assert.rejects(client.send(Uint8Array.of(1), new Uint8Array(16400)), (e) => e.type === "LARGE_MSG");
    assert.equal(sockets[0].sent.length, 2, "only the hello and the PING went out");
    client.close();
  });

  test("no common version, or a hello refused by the router, fail the connect", async () => {
    const old = fakeSocketClass((ws) => ws.open({ minVersion: 1, maxVersion: 8, sessionId: EMPTY }));
    await assert.rejects(connect("ws://r/", KEY_HASH, { WebSocket: old.FakeWebSocket }), (e) => e instanceof HandshakeError && /no common version/.test(e.message));
    const refusing = fakeSocketClass((ws) => {
      ws.onHello = () => ws.close(1000);
      ws.open();
    });
    await assert.rejects(connect("ws://r/", KEY_HASH, { WebSocket: refusing.FakeWebSocket }), (e) => e instanceof HandshakeError && /key hash/.test(e.message));
  });
});

const SESSION_ID = new Uint8Array(32).fill(1);
const CERTIFICATE = crypto.randomBytes(300);
const SIGNED_KEY = crypto.randomBytes(120);

/** A hello whose cert part shows `chain` (docs/protocol.md, "Identity in the server hello"). */
function certHello(chain) {
  return { minVersion: 9, maxVersion: 10, sessionId: SESSION_ID, certChain: chain, signedKey: SIGNED_KEY };
}

/** A router that shows `hello` and answers PING. */
function routerShowing(hello) {
  return pingingRouter(() => {}, hello);
}

/** Run `fn` as on a page without WebCrypto (plain http on a host other than localhost). */
async function withoutWebCrypto(fn) {
  const descriptor = Object.getOwnPropertyDescriptor(globalThis, "crypto");
  Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
  try {
    return await fn();
  } finally {
    Object.defineProperty(globalThis, "crypto", descriptor);
  }
}

describe("router identity in the hello", () => {
  test("a certificate that hashes to the key hash: connected after the hello alone, no PING", async () => {
    const keyHash = await crypto.sha256(CERTIFICATE);
    for (const chain of [[CERTIFICATE], [crypto.randomBytes(50), CERTIFICATE]]) {
      const { FakeWebSocket, sockets } = fakeSocketClass(routerShowing(certHello(chain)));
      const client = await connect("ws://r/", keyHash, { WebSocket: FakeWebSocket });
      assert.equal(sockets[0].sent.length, 1, "only the hello went out");
      assert.deepEqual(sockets[0].hello.keyHash, keyHash);
      assert.equal(client.closed, null);
      client.close();
    }
  });

  test("another certificate: IdentityMismatch, and the connection closes without a hello", async () => {
    const keyHash = await crypto.sha256(CERTIFICATE);
    // In a two-certificate chain the identity is the second: the leaf matching proves nothing.
    for (const chain of [[crypto.randomBytes(300)], [CERTIFICATE, crypto.randomBytes(300)]]) {
      const { FakeWebSocket, sockets } = fakeSocketClass(routerShowing(certHello(chain)));
      const failure = await connect("ws://r/", keyHash, { WebSocket: FakeWebSocket }).catch((e) => e);
      assert.ok(failure instanceof IdentityMismatch, String(failure));
      assert.ok(failure instanceof HandshakeError);
      assert.equal(failure.name, "IdentityMismatch");
      assert.equal(sockets[0].sent.length, 0, "no hello was sent");
      assert.equal(sockets[0].readyState, 3, "the socket is closed");
    }
  });

  test("a hello without a readable cert part is confirmed with a PING, as before", async () => {
    const keyHash = await crypto.sha256(CERTIFICATE);
    const plain = encodeServerHello({ minVersion: 9, maxVersion: 10, sessionId: SESSION_ID });
    // One certificate announced, then a length that runs past the content.
    const broken = concat(plain, Uint8Array.of(1, 0xff, 0xff, 0xff));
    for (const block of [plain, broken]) {
      const { FakeWebSocket, sockets } = fakeSocketClass(routerShowing(block));
      const client = await connect("ws://r/", keyHash, { WebSocket: FakeWebSocket });
      assert.equal(sockets[0].sent.length, 2, "the hello and one PING");
      client.close();
    }
  });

  test("without WebCrypto the certificate is not checked: the PING after the hello is", async () => {
    const right = await crypto.sha256(CERTIFICATE);
    await withoutWebCrypto(async () => {
      const { FakeWebSocket, sockets } = fakeSocketClass(routerShowing(certHello([CERTIFICATE])));
      const client = await connect("ws://r/", right, { WebSocket: FakeWebSocket });
      assert.equal(sockets[0].sent.length, 2, "the hello and one PING");
      client.close();
      // A router that refuses the hello closes the connection: a HandshakeError, not an IdentityMismatch.
      const refusing = fakeSocketClass((ws) => {
        ws.onHello = () => ws.close(1000);
        ws.open(certHello([crypto.randomBytes(300)]));
      });
      const failure = await connect("ws://r/", right, { WebSocket: refusing.FakeWebSocket }).catch((e) => e);
      assert.ok(failure instanceof HandshakeError && !(failure instanceof IdentityMismatch), String(failure));
      assert.match(failure.message, /key hash/);
    });
  });
});

describe("SMPAgent", () => {
  test("reconnects after failures with backoff and subscribes its queues again", async () => {
    const subscribed = [];
    const { FakeWebSocket, sockets } = fakeSocketClass((ws, index) => {
      if (index < 2) return ws.close(1006); // the first two attempts fail
      pingingRouter((w, ts) => {
        subscribed.push([index, ...ts.map((t) => t.cmd.type)]);
        w.push(...ts.map((t) => [t.corrId, t.entityId, { type: "OK" }]));
      })(ws);
    });
    const delays = [];
    const backoff = new Backoff({ initial: 1, maximum: 4, jitter: 0.5 });
    const agent = new SMPAgent({ url: "ws://r/", keyHash: KEY_HASH, WebSocket: FakeWebSocket, backoff, random: () => 0.5 });
    const original = backoff.delay.bind(backoff);
    backoff.delay = (attempt, random) => {
      const d = original(attempt, random);
      delays.push(d);
      return d;
    };
    const statuses = [];
    agent.onEvent((ev) => ev.type === "status" && statuses.push(ev.status));
    const queue = { recipientId: Uint8Array.of(3), rcvAuthSeed: crypto.randomBytes(32) };
    agent.addQueue(queue);
    agent.start();
    const first = await agent.connected();
    await new Promise((resolve) => agent.onEvent((ev) => ev.type === "up" && resolve()));
    assert.deepEqual(delays, [0.75, 1.5]); // ceiling 1 then 2, less half the jitter
    first.close(); // the router goes away: the agent comes back and sends SUB again
    const up = new Promise((resolve) => agent.onEvent((ev) => ev.type === "up" && resolve()));
    const second = await (async () => {
      for (;;) {
        const c = await agent.connected();
        if (c !== first) return c;
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    await up;
    assert.notEqual(second, first);
    assert.deepEqual(subscribed, [[2, "SUB"], [3, "SUB"]]);
    assert.deepEqual(statuses.slice(0, 6), ["connecting", "offline", "connecting", "offline", "connecting", "connected"]);
    assert.equal(sockets.length, 4);
    await agent.stop();
    assert.equal(agent.status, "stopped");
  });

  test("a wrong identity is retried with backoff, like any failed connect, and reported", async () => {
    // The router at the address is replaced by the right one on the third attempt.
    const keyHash = await crypto.sha256(CERTIFICATE);
    const { FakeWebSocket, sockets } = fakeSocketClass((ws, index) =>
      routerShowing(certHello([index < 2 ? crypto.randomBytes(300) : CERTIFICATE]))(ws));
    const delays = [];
    const backoff = new Backoff({ initial: 1, maximum: 4, jitter: 0 });
    const original = backoff.delay.bind(backoff);
    backoff.delay = (attempt, random) => {
      const d = original(attempt, random);
      delays.push(d);
      return d;
    };
    const agent = new SMPAgent({ url: "ws://r/", keyHash, WebSocket: FakeWebSocket, backoff });
    const offline = [];
    agent.onEvent((ev) => ev.type === "status" && ev.status === "offline" && offline.push(ev.error));
    agent.start();
    await agent.connected();
    assert.equal(offline.length, 2);
    assert.ok(offline.every((e) => e instanceof IdentityMismatch), String(offline));
    assert.deepEqual(delays, [1, 2]);
    assert.deepEqual(sockets.map((s) => s.sent.length), [0, 0, 1], "hellos only to the right router");
    await agent.stop();
  });

  test("a temporary SUB error (INTERNAL) is retried after a delay on the same connection", async () => {
    let subs = 0;
    const { FakeWebSocket, sockets } = fakeSocketClass(pingingRouter((ws, ts) => {
      subs++;
      ws.push(...ts.map((t) => [t.corrId, t.entityId, subs === 1 ? { type: "ERR", error: "INTERNAL" } : { type: "OK" }]));
    }));
    const backoff = new Backoff({ initial: 1, maximum: 2 });
    const agent = new SMPAgent({ url: "ws://r/", keyHash: KEY_HASH, WebSocket: FakeWebSocket, backoff });
    const events = [];
    const up = new Promise((resolve) => agent.onEvent((ev) => {
      events.push(ev.type === "subscribe-error" ? `error ${ev.error.type}` : ev.type);
      if (ev.type === "up") resolve();
    }));
    agent.addQueue({ recipientId: Uint8Array.of(4), rcvAuthSeed: crypto.randomBytes(32) });
    agent.start();
    await up;
    assert.deepEqual(events.filter((e) => e !== "status"), ["error INTERNAL", "up"]);
    assert.equal(subs, 2);
    assert.equal(sockets.length, 1);
    await agent.stop();
  });

  test("a queue refused with AUTH, or taken over (END), leaves the set with an event", async () => {
    const { FakeWebSocket } = fakeSocketClass(pingingRouter((ws, ts) => {
      ws.push(...ts.map((t) => [t.corrId, t.entityId, t.entityId[0] === 1 ? { type: "ERR", error: "AUTH" } : { type: "OK" }]));
      ws.push([EMPTY, Uint8Array.of(2), { type: "END" }]);
    }));
    const agent = new SMPAgent({ url: "ws://r/", keyHash: KEY_HASH, WebSocket: FakeWebSocket });
    const removed = [];
    const done = new Promise((resolve) => agent.onEvent((ev) => {
      if (ev.type === "removed") removed.push([ev.queue.recipientId[0], ev.reason]);
      if (removed.length === 2) resolve();
    }));
    agent.addQueue({ recipientId: Uint8Array.of(1), rcvAuthSeed: crypto.randomBytes(32) });
    agent.addQueue({ recipientId: Uint8Array.of(2), rcvAuthSeed: crypto.randomBytes(32) });
    agent.start();
    await done;
    assert.deepEqual(removed.sort(), [[1, "refused"], [2, "end"]]);
    assert.equal(agent.queues.size, 0);
    await agent.stop();
  });
});

describe("timeouts, AbortSignal and keepalive", () => {
  /** A router that answers PING (unless `silent()`) and never anything else. */
  function quietRouter(state = { silent: false, pings: 0 }) {
    return (ws) => {
      ws.onBlock = (ts) => {
        for (const t of ts) {
          if (t.cmd.type !== "PING") continue;
          state.pings++;
          if (!state.silent) ws.push([t.corrId, EMPTY, { type: "PONG" }]);
        }
      };
      ws.open();
    };
  }

  test("an unanswered command rejects with CommandTimeout; the connection stays usable", async () => {
    const { FakeWebSocket, sockets } = fakeSocketClass(quietRouter());
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket, commandTimeout: 50 });
    const queue = { recipientId: Uint8Array.of(3), rcvAuthSeed: crypto.randomBytes(32) };
    const started = Date.now();
    await assert.rejects(client.get(queue), (e) => e instanceof CommandTimeout && /GET/.test(e.message));
    assert.ok(Date.now() - started >= 45);
    // A late answer to the abandoned GET is dropped, not handed out as an event.
    const get = decodeBatch(sockets[0].sent.at(-1)).map(decodeTransmission)[0];
    sockets[0].push([get.corrId, queue.recipientId, { type: "OK" }]);
    await client.ping();
    assert.equal(client.nextEventNow(), null);
    assert.equal(client.closed, null);
    // A per-call timeout overrides the connection's.
    await assert.rejects(client.get(queue, { timeout: 10 }), CommandTimeout);
    client.close();
  });

  test("an AbortSignal abandons a command: not sent if it was not yet, rejected with the reason", async () => {
    const { FakeWebSocket, sockets } = fakeSocketClass(quietRouter());
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket, commandTimeout: 0 });
    const queue = { recipientId: Uint8Array.of(4), rcvAuthSeed: crypto.randomBytes(32) };
    const blocksBefore = sockets[0].sent.length;
    const early = new AbortController();
    const notSent = client.get(queue, { signal: early.signal });
    early.abort(new Error("changed my mind"));
    await assert.rejects(notSent, /changed my mind/);
    await client.ping();
    const sentTypes = sockets[0].sent.slice(blocksBefore)
      .flatMap((b) => decodeBatch(b).map(decodeTransmission).map((t) => decodeCommand(t.command).type));
    assert.deepEqual(sentTypes, ["PING"]);

    const late = new AbortController();
    const waiting = client.get(queue, { signal: late.signal });
    await new Promise((r) => setTimeout(r, 20)); // sent by now; the router does not answer
    late.abort();
    await assert.rejects(waiting, (e) => e.name === "AbortError");
    await assert.rejects(client.get(queue, { signal: AbortSignal.abort() }), (e) => e.name === "AbortError");
    client.close();
  });

  test("silence brings a PING; an unanswered PING closes the connection", async () => {
    const state = { silent: false, pings: 0 };
    const { FakeWebSocket } = fakeSocketClass(quietRouter(state));
    const client = await connect("ws://router/smp", KEY_HASH, {
      WebSocket: FakeWebSocket, confirm: false, pingInterval: 30, pingTimeout: 30,
    });
    await new Promise((r) => setTimeout(r, 120));
    assert.ok(state.pings >= 2, `${state.pings} keepalive PINGs`);
    assert.equal(client.closed, null);
    state.silent = true; // the socket is dead but not closed
    // The keepalive timer does not keep Node running by itself (unref): this one does.
    const hold = setTimeout(() => {}, 5000);
    const error = await client.whenClosed();
    clearTimeout(hold);
    assert.ok(error instanceof ConnectionClosed);
    assert.match(error.message, /no answer to PING/);
  });

  test("pingInterval 0 sends no keepalive", async () => {
    const state = { silent: false, pings: 0 };
    const { FakeWebSocket } = fakeSocketClass(quietRouter(state));
    const client = await connect("ws://router/smp", KEY_HASH, { WebSocket: FakeWebSocket, confirm: false, pingInterval: 0 });
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(state.pings, 0);
    client.close();
  });

  test("an agent replaces a connection that went silent, and subscribes its queues again", async () => {
    const states = [];
    const subs = [];
    const { FakeWebSocket } = fakeSocketClass((ws, n) => {
      const state = { silent: n === 0, pings: 0 };
      states.push(state);
      ws.onBlock = (ts) => {
        for (const t of ts) {
          if (t.cmd.type === "SUB") {
            subs.push(n);
            ws.push([t.corrId, t.entityId, { type: "OK" }]);
          } else if (t.cmd.type === "PING" && !(state.silent && state.pings++ > 0)) {
            ws.push([t.corrId, EMPTY, { type: "PONG" }]); // the first (connect's) PING is answered
          }
        }
      };
      ws.open();
    });
    const agent = new SMPAgent({
      url: "ws://r/", keyHash: KEY_HASH, WebSocket: FakeWebSocket, pingInterval: 20, pingTimeout: 20,
      backoff: new Backoff({ initial: 1, maximum: 5 }),
    });
    const statuses = [];
    agent.onEvent((ev) => ev.type === "status" && statuses.push(ev.status));
    agent.addQueue({ recipientId: Uint8Array.of(1), rcvAuthSeed: crypto.randomBytes(32) });
    agent.start();
    while (subs.filter((n) => n === 1).length === 0) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(statuses.slice(0, 4), ["connecting", "connected", "offline", "connecting"]);
    await agent.stop();
  });

  test("waiting for a connection can be aborted", async () => {
    const { FakeWebSocket } = fakeSocketClass(() => {}); // never opens
    const agent = new SMPAgent({ url: "ws://r/", keyHash: KEY_HASH, WebSocket: FakeWebSocket, timeout: 10_000 });
    agent.start();
    const controller = new AbortController();
    const waiting = agent.withClient(async () => "never", { signal: controller.signal });
    controller.abort(new Error("page closed"));
    await assert.rejects(waiting, /page closed/);
    await agent.stop();
  });
});

describe("signing", () => {
  test("WebCrypto and JavaScript signatures are the same bytes, and verify", async () => {
    assert.equal(await signing.webCryptoEd25519(), true); // Node 20 has Ed25519 in WebCrypto
    const key = crypto.newEd25519();
    const data = crypto.randomBytes(100);
    const signature = await signing.sign(key.seed, data);
    assert.deepEqual(signature, signing.signInJavaScript(key.seed, data));
    assert.ok(crypto.verify(signature, key.publicKey, data));
  });

  test("a signing key is kept for every queue, not only for the last 256", async () => {
    const seeds = Array.from({ length: 1000 }, () => crypto.randomBytes(32));
    const before = signing.cachedSigningKeys();
    await Promise.all(seeds.map((seed) => signing.sign(seed, Uint8Array.of(1))));
    assert.equal(signing.cachedSigningKeys(), before + 1000);
    signing.forgetSigningKey(seeds[0]);
    assert.equal(signing.cachedSigningKeys(), before + 999);
  });
});

test("without a WebSocket (Node 20 without its flag), connect says how to get one", async () => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "WebSocket");
  Object.defineProperty(globalThis, "WebSocket", { value: undefined, configurable: true });
  try {
    await assert.rejects(connect("ws://127.0.0.1:1/smp", KEY_HASH), (e) =>
      e instanceof TypeError && /--experimental-websocket/.test(e.message) && /options\.WebSocket/.test(e.message));
  } finally {
    if (saved) Object.defineProperty(globalThis, "WebSocket", saved);
    else delete globalThis.WebSocket;
  }
});

describe("keys made by WebCrypto", () => {
  test("an X25519 key and box key from WebCrypto are what tweetnacl computes", async () => {
    assert.equal(await crypto.webCryptoX25519(), true); // Node 20 has X25519 in WebCrypto
    const router = crypto.newX25519();
    const mine = await crypto.generateX25519();
    assert.deepEqual(mine.publicKey, crypto.x25519Public(mine.privateKey));
    assert.deepEqual(await crypto.deriveBoxKey(mine.privateKey, router.publicKey),
      crypto.boxKey(mine.privateKey, router.publicKey));
    // A box made with the router's side of the key opens with ours.
    const msgId = crypto.randomBytes(24);
    const body = crypto.encryptMsgBody(crypto.boxKey(router.privateKey, mine.publicKey), msgId, 5, latin1("F"), utf8("hi"));
    const opened = crypto.decryptMsgBody(await crypto.deriveBoxKey(mine.privateKey, router.publicKey), msgId, body);
    assert.equal(new TextDecoder().decode(opened.body), "hi");
  });

  test("an Ed25519 key from WebCrypto: its public key is the seed's, and it signs at once", async () => {
    const key = await crypto.generateEd25519();
    assert.deepEqual(key.publicKey, crypto.ed25519Public(key.seed));
    const data = crypto.randomBytes(50);
    const cachedBefore = signing.cachedSigningKeys();
    const signature = await crypto.sign(key.seed, data);
    assert.equal(signing.cachedSigningKeys(), cachedBefore); // kept when made, not imported again
    assert.deepEqual(signature, signing.signInJavaScript(key.seed, data));
  });

  test("without WebCrypto the same calls fall back to JavaScript", async () => {
    await withoutWebCrypto(async () => {
      const key = await crypto.generateEd25519();
      assert.deepEqual(key.publicKey, crypto.ed25519Public(key.seed));
      const router = crypto.newX25519();
      const mine = await crypto.generateX25519();
      assert.deepEqual(await crypto.deriveBoxKey(mine.privateKey, router.publicKey),
        crypto.boxKey(mine.privateKey, router.publicKey));
    });
  });
});
