// The worked examples of docs/protocol.md ("Worked examples"), recomputed by
// this client's codec from the page's own inputs and compared byte for byte.
//
// The examples are read from the page (code blocks marked `hex <name>`), so the
// page and this codec cannot drift apart. SMP_PROTOCOL_PAGE names another copy
// of the page to check against.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  BatchPacker, authorizedBytes, concat, crypto, encodeClientHello, encodeCommand, encodeResponse,
  encodeServerHello, encodeTransmission, equal, fromHex, latin1, serviceSignedBytes, toHex,
} from "../smp/index.js";

const PAGE = process.env.SMP_PROTOCOL_PAGE ?? fileURLToPath(new URL("../../docs/protocol.md", import.meta.url));

/** The bytes of one block: hex tokens, "ASCII", xx*n; `|` groups, `;` comments. */
export function parseHex(text) {
  const parts = [];
  for (const line of text.split("\n")) {
    for (const token of line.split(";")[0].match(/"[^"]*"|\S+/g) ?? []) {
      if (token === "|") continue;
      if (token.startsWith('"')) parts.push(latin1(token.slice(1, -1)));
      else if (token.includes("*")) {
        const [byte, count] = token.split("*");
        parts.push(new Uint8Array(Number(count)).fill(parseInt(byte, 16)));
      } else parts.push(fromHex(token));
    }
  }
  return concat(...parts);
}

function pageExamples() {
  const examples = new Map();
  for (const m of readFileSync(PAGE, "utf8").matchAll(/^```hex (\S+)[^\n]*\n([\s\S]*?)^```/gm)) {
    assert.ok(!examples.has(m[1]), `example ${m[1]} appears twice`);
    examples.set(m[1], parseHex(m[2]));
  }
  return examples;
}

const EX = pageExamples();
const ex = (name) => {
  assert.ok(EX.has(name), `the page has no example ${name}`);
  return EX.get(name);
};

// The inputs the page states in prose.
const SESSION_ID = new Uint8Array(32).fill(0xaa);
const KEY_HASH = new Uint8Array(32).fill(0xbb);
const RCV_ID = new Uint8Array(24).fill(0x11);
const SND_ID = new Uint8Array(24).fill(0x22);
const MSG_ID = new Uint8Array(24).fill(0x33);
const MSG_TS = 1700000000;
const EMPTY = new Uint8Array(0);

function oneBlock(...transmissions) {
  const packer = new BatchPacker();
  for (const t of transmissions) assert.ok(packer.add(t));
  return packer.takeBlock();
}

function subSignature() {
  return crypto.authorize(ex("ed25519-seed"), SESSION_ID, ex("corr-id"), RCV_ID, latin1("SUB"));
}

const msgKey = () => crypto.boxKey(ex("client-x25519-private"), ex("router-x25519-spki"));

// Each example this client can compute, from the page's inputs.
const COMPUTED = {
  "ed25519-spki": () => crypto.ed25519Public(ex("ed25519-seed")),
  "service-spki": () => crypto.ed25519Public(ex("service-seed")),
  "client-x25519-spki": () => crypto.x25519Public(ex("client-x25519-private")),
  "router-x25519-spki": () => crypto.x25519Public(ex("router-x25519-private")),
  "router-hello": () => encodeServerHello({ minVersion: 9, maxVersion: 10, sessionId: SESSION_ID }),
  "client-hello": () => encodeClientHello({ version: 10, keyHash: KEY_HASH, clientKey: ex("client-x25519-spki") }),
  "service-signed-bytes": () => serviceSignedBytes(SESSION_ID, KEY_HASH, ex("service-spki")),
  "service-signature": async () => (await crypto.proveService(ex("service-seed"), SESSION_ID, KEY_HASH)).signature,
  "service-id": () => crypto.serviceId(ex("service-spki")),
  "service-client-hello": async () => encodeClientHello({
    version: 10, keyHash: KEY_HASH, clientKey: ex("client-x25519-spki"),
    service: await crypto.proveService(ex("service-seed"), SESSION_ID, KEY_HASH),
  }),
  "ping-block": () => oneBlock(encodeTransmission({
    authorization: EMPTY, corrId: ex("corr-id"), entityId: EMPTY, command: encodeCommand({ type: "PING" }),
  })),
  "pong-block": () => oneBlock(encodeTransmission({
    authorization: EMPTY, corrId: ex("corr-id"), entityId: EMPTY, command: encodeResponse({ type: "PONG" }),
  })),
  "sub-authorized": () => authorizedBytes(SESSION_ID, ex("corr-id"), RCV_ID, encodeCommand({ type: "SUB" })),
  "sub-signature": subSignature,
  "sub-block": async () => oneBlock(encodeTransmission({
    authorization: await subSignature(), corrId: ex("corr-id"), entityId: RCV_ID, command: encodeCommand({ type: "SUB" }),
  })),
  "new-command": () => encodeCommand({
    type: "NEW", rcvAuthKey: ex("ed25519-spki"), rcvDhKey: ex("client-x25519-spki"),
    basicAuth: null, subscribe: true, sndSecure: true,
  }),
  "ids-response": () => encodeResponse({
    type: "IDS", rcvId: RCV_ID, sndId: SND_ID, srvDhKey: ex("router-x25519-spki"), sndSecure: true,
  }),
  "msg-box-key": msgKey,
  "msg-enc-body-head": () => crypto.encryptMsgBody(msgKey(), MSG_ID, MSG_TS, latin1("T"), latin1("hi")).subarray(0, 32),
  "soks-3": () => encodeResponse({ type: "SOKS", count: 3 }),
  "ends-2": () => encodeResponse({ type: "ENDS", count: 2 }),
  "alls": () => encodeResponse({ type: "ALLS" }),
};

// Examples that are inputs (keys, ids) or plain text of a box, checked by what uses them.
const INPUTS = new Set(["corr-id", "ed25519-seed", "service-seed", "client-x25519-private", "router-x25519-private", "msg-plain"]);

const onPage = [...EX.keys()];

test("docs/protocol.md has worked examples for this client to check", (t) => {
  if (/^## Worked examples$/m.test(readFileSync(PAGE, "utf8"))) {
    assert.ok(onPage.length > 0, `no \`hex\` examples found in ${PAGE}`);
  } else {
    t.diagnostic(`${PAGE} has no "Worked examples" section: only codec.test.mjs's examples apply`);
  }
});

for (const name of onPage.filter((n) => Object.hasOwn(COMPUTED, n))) {
  test(`worked example ${name}`, async () => {
    const computed = await COMPUTED[name]();
    assert.equal(toHex(computed), toHex(EX.get(name)));
  });
}

test("every example of the page is an input or is computed here", () => {
  const unknown = onPage.filter((n) => !Object.hasOwn(COMPUTED, n) && !INPUTS.has(n));
  assert.deepEqual(unknown, []);
});

test("the MSG example's plain text is what its box opens to", () => {
  if (!EX.has("msg-plain")) return;
  const opened = crypto.decryptMsgBody(msgKey(), MSG_ID, crypto.encryptMsgBody(msgKey(), MSG_ID, MSG_TS, latin1("T"), latin1("hi")));
  const plain = concat(ex("msg-plain"));
  assert.ok(equal(plain.subarray(8, 9), opened.flags) && equal(plain.subarray(10), opened.body));
  assert.equal(opened.ts, MSG_TS);
});
