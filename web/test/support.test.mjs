// Bytes, addresses, backoff and the stores.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Backoff, MemoryStore, formatRouterAddress, fromBase64url, fromHex, parseRouterAddress,
  toBase64url, toHex,
} from "../smp/index.js";

test("base64url both ways, padded or not", () => {
  for (let n = 0; n < 40; n++) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 37 + n) & 255);
    assert.deepEqual(fromBase64url(toBase64url(bytes)), bytes);
    assert.deepEqual(fromBase64url(toBase64url(bytes, true)), bytes);
    assert.equal(toBase64url(bytes, true), Buffer.from(bytes).toString("base64url") + "=".repeat((3 - (n % 3)) % 3));
  }
  assert.throws(() => fromBase64url("a"), SyntaxError);
  assert.throws(() => fromBase64url("ab!c"), SyntaxError);
  assert.equal(toHex(fromHex("00 ff 10")), "00ff10");
});

test("an smp:// address carries the key hash, host, port and optionally a path", () => {
  const keyHash = Uint8Array.from({ length: 32 }, (_, i) => i);
  const text = formatRouterAddress(keyHash, "127.0.0.1", 5224);
  assert.match(text, /^smp:\/\/[A-Za-z0-9_-]+=@127\.0\.0\.1:5224$/);
  assert.deepEqual(parseRouterAddress(text), { keyHash, host: "127.0.0.1", port: 5224, path: "/" });
  assert.equal(parseRouterAddress(`${text}/smp`).path, "/smp");
  assert.throws(() => parseRouterAddress("smp://abc@h:1"), SyntaxError);
});

test("backoff delays grow, are capped, and are spread by jitter", () => {
  const b = new Backoff({ initial: 100, maximum: 1000, factor: 2, jitter: 0.5 });
  assert.deepEqual([0, 1, 2, 3, 4, 10].map((n) => b.ceiling(n)), [100, 200, 400, 800, 1000, 1000]);
  assert.equal(b.delay(2, () => 0), 400);
  assert.equal(b.delay(2, () => 1), 200);
  const none = new Backoff({ initial: 100, maximum: 100, jitter: 0 });
  assert.equal(none.delay(5, () => 0.7), 100);
  assert.throws(() => new Backoff({ initial: 0 }), RangeError);
  assert.throws(() => new Backoff({ jitter: 2 }), RangeError);
});

test("the memory store keeps copies, lists keys by prefix, and writes several at once", async () => {
  const store = new MemoryStore();
  const value = { a: Uint8Array.of(1, 2) };
  await store.put("q/1", value);
  value.a[0] = 9;
  assert.deepEqual(await store.get("q/1"), { a: Uint8Array.of(1, 2) });
  await store.putMany([["q/2", 2], ["s/1", 3]]);
  assert.deepEqual(await store.keys("q/"), ["q/1", "q/2"]);
  await store.delete("q/1");
  assert.equal(await store.get("q/1"), undefined);
});
