// Ed25519 signatures for command authorization (docs/protocol.md,
// "Transmissions and authorization").
//
// A page that holds many queues signs one SUB per queue on every connection,
// so signing speed decides how fast it comes back online. WebCrypto's Ed25519
// (Chromium 137+, Firefox 129+, Safari 17+, Node 20) signs in well under a
// millisecond in native code; where it is missing (older browsers, and every
// plain-http page that is not on localhost: browsers give `crypto.subtle`
// only to secure contexts) @noble/ed25519 signs in JavaScript, several times
// faster than tweetnacl, with tweetnacl's SHA-512 (one copy of it in a
// bundle). Both give the same bytes: Ed25519 signatures are deterministic.

import * as ed25519 from "@noble/ed25519";

import { concat, fromHex, toHex } from "./bytes.js";
import nacl from "./nacl.js";

ed25519.hashes.sha512 = (message) => nacl.hash(message);

// PKCS#8 PrivateKeyInfo for an Ed25519 seed (RFC 8410): this prefix, then the 32 bytes.
const PKCS8_ED25519_PREFIX = fromHex("302e020100300506032b657004220420");

/**
 * Signing keys kept per seed: importing one into WebCrypto costs a scalar
 * multiplication, as much as the signature. Every queue a page holds is
 * signed for on each reconnection, so the cache is sized for many thousands
 * of queues; past that, the oldest key is imported again when next needed.
 */
export const MAX_CACHED_SIGNING_KEYS = 65536;

/** @type {Map<string, Promise<CryptoKey>>} */
const importedKeys = new Map();

/** @type {Promise<boolean> | null} */
let webCryptoWorks = null;

/**
 * Whether this environment's WebCrypto signs Ed25519 (checked once, by signing).
 * @returns {Promise<boolean>}
 */
export function webCryptoEd25519() {
  if (!globalThis.crypto?.subtle) return Promise.resolve(false);
  if (webCryptoWorks === null) webCryptoWorks = probe();
  return webCryptoWorks;
}

async function probe() {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return false;
  try {
    const seed = new Uint8Array(32).fill(7);
    const key = await importSeed(subtle, seed);
    const data = Uint8Array.of(1, 2, 3);
    const signature = new Uint8Array(await subtle.sign("Ed25519", key, data));
    return ed25519.verify(signature, data, ed25519.getPublicKey(seed));
  } catch {
    return false;
  }
}

/**
 * @param {SubtleCrypto} subtle
 * @param {Uint8Array} seed32
 */
function importSeed(subtle, seed32) {
  return subtle.importKey("pkcs8", concat(PKCS8_ED25519_PREFIX, seed32), { name: "Ed25519" }, false, ["sign"]);
}

/** @param {Uint8Array} seed32 */
function cryptoKey(seed32) {
  const id = toHex(seed32);
  let key = importedKeys.get(id);
  if (!key) {
    if (importedKeys.size >= MAX_CACHED_SIGNING_KEYS) importedKeys.delete(importedKeys.keys().next().value);
    key = importSeed(globalThis.crypto.subtle, seed32);
    importedKeys.set(id, key);
    key.catch(() => importedKeys.delete(id));
  }
  return key;
}

/** How many signing keys are imported and kept (for tests and inspection). */
export function cachedSigningKeys() {
  return importedKeys.size;
}

/** Forget the signing key of `seed32` (e.g. of a deleted queue). @param {Uint8Array} seed32 */
export function forgetSigningKey(seed32) {
  importedKeys.delete(toHex(seed32));
}

/**
 * The Ed25519 signature (64 bytes) of `data` by the key with seed `seed32`.
 * @param {Uint8Array} seed32
 * @param {Uint8Array} data
 * @returns {Promise<Uint8Array>}
 */
export async function sign(seed32, data) {
  if (seed32.length !== 32) throw new RangeError(`Ed25519 seed must be 32 bytes, got ${seed32.length}`);
  if (await webCryptoEd25519()) {
    const key = await cryptoKey(seed32);
    return new Uint8Array(await globalThis.crypto.subtle.sign("Ed25519", key, data));
  }
  return ed25519.sign(data, seed32);
}

/**
 * A fresh signing key, {seed, publicKey (raw, 32 bytes)}: made by WebCrypto
 * where it signs Ed25519, and then kept for signing at once (no import), else
 * in JavaScript.
 * @returns {Promise<{seed: Uint8Array, publicKey: Uint8Array}>}
 */
export async function generateEd25519() {
  if (await webCryptoEd25519()) {
    const subtle = globalThis.crypto.subtle;
    const pair = /** @type {CryptoKeyPair} */ (await subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]));
    const seed = new Uint8Array(await subtle.exportKey("pkcs8", pair.privateKey)).slice(-32);
    const publicKey = new Uint8Array(await subtle.exportKey("raw", pair.publicKey));
    const id = toHex(seed);
    if (importedKeys.size >= MAX_CACHED_SIGNING_KEYS) importedKeys.delete(importedKeys.keys().next().value);
    importedKeys.set(id, Promise.resolve(pair.privateKey));
    return { seed, publicKey };
  }
  const seed = nacl.randomBytes(32);
  return { seed, publicKey: ed25519.getPublicKey(seed) };
}

/**
 * The signature in JavaScript alone, without WebCrypto (what pages without it use).
 * @param {Uint8Array} seed32
 * @param {Uint8Array} data
 * @returns {Uint8Array}
 */
export function signInJavaScript(seed32, data) {
  return ed25519.sign(data, seed32);
}

/**
 * The raw 32-byte Ed25519 public key of a seed.
 * @param {Uint8Array} seed32
 * @returns {Uint8Array}
 */
export function publicKeyOf(seed32) {
  return ed25519.getPublicKey(seed32);
}
