// One Ed25519 signature per way the web client can sign, in Node (V8, as Chromium):
//
//   node bench/web_signing.mjs [count]
//
// tweetnacl (what the client used before), @noble/ed25519 (its fallback now)
// and WebCrypto (its first choice), each over `count` fresh 200-byte messages
// with one key; and WebCrypto with a fresh key per signature (import included),
// which is what a reconnection with many queues costs the first time.
// Prints JSON: microseconds per signature, the median of five rounds.

import { createRequire } from "node:module";

const require = createRequire(new URL("../web/package.json", import.meta.url));
const nacl = require("tweetnacl");
const signing = await import("../web/smp/signing.js");

const count = Number(process.argv[2] ?? 200);
const messages = Array.from({ length: count }, () => nacl.randomBytes(200));
const seeds = Array.from({ length: count }, () => nacl.randomBytes(32));
const seed = seeds[0];
const secretKey = nacl.sign.keyPair.fromSeed(seed).secretKey;

async function perSignature(fn) {
  const rounds = [];
  for (let r = 0; r < 5; r++) {
    const started = performance.now();
    await fn();
    rounds.push(((performance.now() - started) * 1000) / count);
  }
  return rounds.sort((a, b) => a - b)[2];
}

if (!(await signing.webCryptoEd25519())) throw new Error("this Node has no WebCrypto Ed25519");
const result = {
  count,
  tweetnacl_us: await perSignature(async () => messages.forEach((m) => nacl.sign.detached(m, secretKey))),
  noble_us: await perSignature(async () => messages.forEach((m) => signing.signInJavaScript(seed, m))),
  webcrypto_us: await perSignature(() => Promise.all(messages.map((m) => signing.sign(seed, m)))),
};
let round = 0;
result.webcrypto_fresh_keys_us = await perSignature(() => {
  const fresh = seeds.map((s) => s.map((b) => b ^ ++round % 251));
  return Promise.all(messages.map((m, i) => signing.sign(fresh[i], m)));
});
result.node = process.version;
console.log(JSON.stringify(result));
