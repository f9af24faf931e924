// Signatures and MSG bodies on tweetnacl.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ProtocolError, authorizedBytes, crypto, latin1, keyType, utf8 } from "../smp/index.js";

test("an authorization is an Ed25519 signature over ss(sessionId) ss(corrId) ss(entityId) command", async () => {
  const key = crypto.newEd25519();
  assert.equal(keyType(key.publicKey), "ed25519");
  const sessionId = crypto.randomBytes(32);
  const sig = await crypto.authorize(key.seed, sessionId, latin1("c"), latin1("e"), latin1("SUB"));
  assert.equal(sig.length, 64);
  assert.ok(crypto.verify(sig, key.publicKey, authorizedBytes(sessionId, latin1("c"), latin1("e"), latin1("SUB"))));
  assert.ok(!crypto.verify(sig, key.publicKey, authorizedBytes(sessionId, latin1("c"), latin1("e"), latin1("OFF"))));
});

test("a MSG body opens with the key both sides compute, to its timestamp, flags and body", () => {
  const recipient = crypto.newX25519();
  const router = crypto.newX25519();
  const routerSide = crypto.boxKey(router.privateKey, recipient.publicKey);
  const recipientSide = crypto.boxKey(recipient.privateKey, router.publicKey);
  assert.deepEqual(routerSide, recipientSide);
  const msgId = crypto.randomBytes(24);
  const enc = crypto.encryptMsgBody(routerSide, msgId, 1700000000, latin1("T"), utf8("héllo"));
  assert.equal(enc.length, 16122);
  const m = crypto.decryptMsgBody(recipientSide, msgId, enc);
  assert.deepEqual(m, { ts: 1700000000, flags: latin1("T"), body: utf8("héllo"), quota: false });
  const marker = crypto.decryptMsgBody(recipientSide, msgId, crypto.encryptMsgBody(routerSide, msgId, 5, latin1("F"), new Uint8Array(0), true));
  assert.equal(marker.quota, true);
  assert.equal(marker.ts, 5);
  const tampered = enc.slice();
  tampered[100] ^= 1;
  assert.throws(() => crypto.decryptMsgBody(recipientSide, msgId, tampered), (e) => e instanceof ProtocolError && e.type === "CRYPTO");
  assert.throws(() => crypto.encryptMsgBody(routerSide, msgId, 0, latin1("F"), new Uint8Array(16096)), (e) => e.type === "LARGE_MSG");
});

test("NMSG metadata opens to msgId and timestamp", () => {
  const key = crypto.randomBytes(32);
  const msgId = crypto.randomBytes(24);
  const { nonce, encMeta } = crypto.encryptNtfMeta(key, msgId, 42);
  assert.equal(encMeta.length, 144);
  assert.deepEqual(crypto.decryptNtfMeta(key, nonce, encMeta), { msgId, ts: 42 });
});

test("a DH key that is not X25519 is CMD SYNTAX", () => {
  const ed = crypto.newEd25519();
  assert.throws(() => crypto.boxKey(crypto.randomBytes(32), ed.publicKey), (e) => e.type === "CMD SYNTAX");
});
