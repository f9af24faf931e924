// Signatures and per-queue encryption (docs/protocol.md, "Transmissions and
// authorization", "Per-queue encryption"), on tweetnacl.
//
// MSG bodies are NaCl crypto_box (XSalsa20-Poly1305) with the precomputed key
// S = crypto_box_beforenm(router DH key, our private key) and nonce = msgId;
// their wire form is the 16-byte MAC followed by the ciphertext.

import { concat, equal, fromHex } from "./bytes.js";
import { ss } from "./encoding.js";
import { CMD_SYNTAX, CRYPTO, LARGE_MSG, ProtocolError } from "./errors.js";
import { KeyType, ed25519Spki, keyType, rawKey, x25519Spki } from "./keys.js";
import nacl from "./nacl.js";
import * as signing from "./signing.js";
import { identityCertificate } from "./handshake.js";
import { authorizedBytes } from "./transmission.js";

export const MSG_PADDED_SIZE = 16106;
export const MSG_ENC_SIZE = MSG_PADDED_SIZE + 16; // 16122
export const NTF_META_PADDED_SIZE = 128;
export const NONCE_SIZE = 24;
const QUOTA = Uint8Array.of(0x51, 0x55, 0x4f, 0x54, 0x41, 0x20); // "QUOTA "
const PAD = 0x23;

export const randomBytes = (n) => nacl.randomBytes(n);

/** A fresh signing key: {seed (32 bytes), publicKey (Ed25519 SPKI)}. */
export function newEd25519() {
  const seed = nacl.randomBytes(32);
  return { seed, publicKey: ed25519Public(seed) };
}

/**
 * A fresh signing key as `newEd25519` gives it, made by WebCrypto where it has
 * Ed25519 (signing.js keeps it for signing at once).
 * @returns {Promise<{seed: Uint8Array, publicKey: Uint8Array}>}
 */
export async function generateEd25519() {
  const { seed, publicKey } = await signing.generateEd25519();
  return { seed, publicKey: ed25519Spki(publicKey) };
}

// PKCS#8 PrivateKeyInfo of an X25519 key (RFC 8410) up to the raw 32 bytes,
// and HSalsa20's constant: crypto_box_beforenm is HSalsa20 of the X25519 secret.
const PKCS8_X25519_PREFIX = fromHex("302e020100300506032b656e04220420");
const SIGMA = Uint8Array.from("expand 32-byte k", (c) => c.charCodeAt(0));

/** @type {Promise<boolean> | null} */
let x25519Works = null;

/** Whether this environment's WebCrypto does X25519 (checked once, against tweetnacl). */
export function webCryptoX25519() {
  if (!globalThis.crypto?.subtle) return Promise.resolve(false);
  if (x25519Works === null) x25519Works = probeX25519();
  return x25519Works;
}

async function probeX25519() {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return false;
  try {
    const peer = nacl.box.keyPair();
    const mine = await generateX25519WebCrypto(subtle);
    const key = await boxKeyWebCrypto(subtle, mine.privateKey, peer.publicKey);
    return equal(key, nacl.box.before(peer.publicKey, mine.privateKey));
  } catch {
    return false;
  }
}

async function generateX25519WebCrypto(subtle) {
  const pair = /** @type {CryptoKeyPair} */ (await subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]));
  const privateKey = new Uint8Array(await subtle.exportKey("pkcs8", pair.privateKey)).slice(-32);
  const publicKey = new Uint8Array(await subtle.exportKey("raw", pair.publicKey));
  return { privateKey, publicKey };
}

async function boxKeyWebCrypto(subtle, priv32, peerRaw32) {
  const algorithm = { name: "X25519" };
  const [mine, theirs] = await Promise.all([
    subtle.importKey("pkcs8", concat(PKCS8_X25519_PREFIX, priv32), algorithm, false, ["deriveBits"]),
    subtle.importKey("raw", peerRaw32, algorithm, false, []),
  ]);
  const shared = new Uint8Array(await subtle.deriveBits({ name: "X25519", public: theirs }, mine, 256));
  const key = new Uint8Array(32);
  nacl.lowlevel.crypto_core_hsalsa20(key, new Uint8Array(16), shared, SIGMA);
  return key;
}

/**
 * A fresh DH key as `newX25519` gives it, made by WebCrypto where it has X25519.
 * @returns {Promise<{privateKey: Uint8Array, publicKey: Uint8Array}>}
 */
export async function generateX25519() {
  if (!(await webCryptoX25519())) return newX25519();
  const { privateKey, publicKey } = await generateX25519WebCrypto(globalThis.crypto.subtle);
  return { privateKey, publicKey: x25519Spki(publicKey) };
}

/**
 * `boxKey` by WebCrypto's X25519 where it has it: the same 32 bytes.
 * @param {Uint8Array} priv32
 * @param {Uint8Array} peerSpki
 * @returns {Promise<Uint8Array>}
 */
export async function deriveBoxKey(priv32, peerSpki) {
  if (keyType(peerSpki) !== KeyType.X25519) {
    throw new ProtocolError(CMD_SYNTAX, "DH key must be X25519");
  }
  if (!(await webCryptoX25519())) return boxKey(priv32, peerSpki);
  return boxKeyWebCrypto(globalThis.crypto.subtle, priv32, rawKey(peerSpki));
}

/** A fresh DH key: {privateKey (32 bytes), publicKey (X25519 SPKI)}. */
export function newX25519() {
  const privateKey = nacl.randomBytes(32);
  return { privateKey, publicKey: x25519Public(privateKey) };
}

/** @param {Uint8Array} seed32 @returns {Uint8Array} the Ed25519 SPKI of the seed's public key */
export function ed25519Public(seed32) {
  return ed25519Spki(signing.publicKeyOf(seed32));
}

/** @param {Uint8Array} priv32 @returns {Uint8Array} the X25519 SPKI of the private key's public key */
export function x25519Public(priv32) {
  return x25519Spki(nacl.scalarMult.base(priv32));
}

/**
 * Ed25519 signature (64 bytes) of `data` (signing.js: WebCrypto where it works).
 * @param {Uint8Array} seed32
 * @param {Uint8Array} data
 * @returns {Promise<Uint8Array>}
 */
export function sign(seed32, data) {
  return signing.sign(seed32, data);
}

/**
 * @param {Uint8Array} signature
 * @param {Uint8Array} publicSpki
 * @param {Uint8Array} data
 * @returns {boolean}
 */
export function verify(signature, publicSpki, data) {
  if (keyType(publicSpki) !== KeyType.ED25519 || signature.length !== 64) return false;
  return nacl.sign.detached.verify(data, signature, rawKey(publicSpki));
}

/**
 * The authorization of a transmission: a signature over sessionId, corrId, entityId, command.
 * @param {Uint8Array} seed32
 * @param {Uint8Array} sessionId
 * @param {Uint8Array} corrId
 * @param {Uint8Array} entityId
 * @param {Uint8Array} command
 * @returns {Promise<Uint8Array>}
 */
export function authorize(seed32, sessionId, corrId, entityId, command) {
  return sign(seed32, authorizedBytes(sessionId, corrId, entityId, command));
}

/** The precomputed crypto_box key for our private key and the peer's X25519 SPKI. */
export function boxKey(priv32, peerSpki) {
  if (keyType(peerSpki) !== KeyType.X25519) {
    throw new ProtocolError(CMD_SYNTAX, "DH key must be X25519");
  }
  return nacl.box.before(rawKey(peerSpki), priv32);
}

function pad(plain, size) {
  const out = new Uint8Array(size).fill(PAD);
  out[0] = plain.length >> 8;
  out[1] = plain.length & 255;
  out.set(plain, 2);
  return out;
}

function int64(n) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(n));
  return out;
}

function readInt64(bytes, at) {
  return Number(new DataView(bytes.buffer, bytes.byteOffset + at, 8).getBigInt64(0));
}

/** The router's side of a MSG body (for tests): box(pad(plain, 16106), nonce = msgId). */
export function encryptMsgBody(key32, msgId, ts, flags, body, quota = false) {
  const plain = quota
    ? concat(QUOTA, int64(ts))
    : concat(int64(ts), flags, Uint8Array.of(0x20), body);
  if (plain.length > MSG_PADDED_SIZE - 2) {
    throw new ProtocolError(LARGE_MSG, `message of ${body.length} bytes`);
  }
  return nacl.box.after(pad(plain, MSG_PADDED_SIZE), msgId, key32);
}

function open(enc, nonce, key32) {
  if (nonce.length !== NONCE_SIZE) throw new ProtocolError(CRYPTO, "bad nonce");
  const plain = nacl.box.open.after(enc, nonce, key32);
  if (!plain) throw new ProtocolError(CRYPTO, "cannot decrypt");
  return plain;
}

function unpad(padded) {
  if (padded.length < 2) throw new ProtocolError(CRYPTO, "short padded block");
  const n = (padded[0] << 8) | padded[1];
  if (n + 2 > padded.length) throw new ProtocolError(CRYPTO, "bad padding length");
  return padded.subarray(2, 2 + n);
}

function startsWith(data, prefix) {
  return data.length >= prefix.length && prefix.every((b, i) => data[i] === b);
}

/**
 * A MSG body opened with the queue's box key: {ts, flags, body, quota}.
 * Throws ProtocolError(CRYPTO) when it does not open or does not parse.
 */
export function decryptMsgBody(key32, msgId, encBody) {
  const plain = unpad(open(encBody, msgId, key32));
  if (startsWith(plain, QUOTA)) {
    if (plain.length < 14) throw new ProtocolError(CRYPTO, "bad quota marker");
    return { ts: readInt64(plain, 6), flags: new Uint8Array(0), body: new Uint8Array(0), quota: true };
  }
  const sp = plain.indexOf(0x20, 8);
  if (plain.length < 10 || sp < 9) throw new ProtocolError(CRYPTO, "bad message body");
  return { ts: readInt64(plain, 0), flags: plain.slice(8, sp), body: plain.slice(sp + 1), quota: false };
}

/** {msgId, ts} from an NMSG's encMeta; bytes after ts are ignored. */
export function decryptNtfMeta(key32, nonce, encMeta) {
  const meta = unpad(open(encMeta, nonce, key32));
  if (!meta.length) throw new ProtocolError(CRYPTO, "empty metadata");
  const end = 1 + meta[0];
  if (end + 8 > meta.length) throw new ProtocolError(CRYPTO, "bad metadata");
  return { msgId: meta.slice(1, end), ts: readInt64(meta, end) };
}

/** The router's side of NMSG metadata (for tests): {nonce, encMeta}. */
export function encryptNtfMeta(key32, msgId, ts, nonce = nacl.randomBytes(NONCE_SIZE)) {
  const meta = concat(ss(msgId), int64(ts));
  return { nonce, encMeta: nacl.box.after(pad(meta, NTF_META_PADDED_SIZE), nonce, key32) };
}

/**
 * SHA-256 of `data` with WebCrypto, or null where there is none: browsers
 * give `crypto.subtle` only to secure contexts (https, or http on localhost).
 */
export async function sha256(data) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return null;
  return new Uint8Array(await subtle.digest("SHA-256", data));
}

/**
 * Whether the server hello's identity certificate hashes to `keyHash`
 * (docs/protocol.md, "Identity in the server hello"); null when there is
 * nothing to check it with: no certificate in the hello, or no WebCrypto.
 */
export async function identityMatches(hello, keyHash) {
  const certificate = identityCertificate(hello.certChain);
  if (!certificate) return null;
  const digest = await sha256(certificate);
  return digest && equal(digest, keyHash);
}

/** The raw X25519 shared secret (not nacl.box.before of it): block encryption's input. */
export function dhSecret(priv32, peerRaw32) {
  return nacl.scalarMult(priv32, peerRaw32);
}

/** The raw X25519 key inside the hello's signed key (docs/protocol.md#handshake-router-hello):
 * SEQUENCE { SPKI, algorithm, signature }. */
export function helloDhKey(signedKey) {
  let pos = 1;
  const outer = signedKey[pos++];
  if (signedKey[0] !== 0x30) throw new ProtocolError(CMD_SYNTAX, "signed key is not a SEQUENCE");
  if (outer & 0x80) pos += outer & 0x7f;
  const spki = signedKey.subarray(pos, pos + 44);
  if (keyType(spki) !== KeyType.X25519) throw new ProtocolError(CMD_SYNTAX, "signed key is not X25519");
  return rawKey(spki);
}
