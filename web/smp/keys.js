// Public keys as X.509 SubjectPublicKeyInfo DER (docs/protocol.md, "Commands and
// responses"): for these key types the DER is a fixed prefix and the raw key.

import { concat, fromHex } from "./bytes.js";

export const KeyType = Object.freeze({ ED25519: "ed25519", X25519: "x25519", ED448: "ed448" });

export const ED25519_PREFIX = fromHex("302a300506032b6570032100");
export const X25519_PREFIX = fromHex("302a300506032b656e032100");
export const ED448_PREFIX = fromHex("3043300506032b6571033a00");

const KINDS = [
  [KeyType.ED25519, ED25519_PREFIX, 44],
  [KeyType.X25519, X25519_PREFIX, 44],
  [KeyType.ED448, ED448_PREFIX, 69],
];

function startsWith(data, prefix) {
  for (let i = 0; i < prefix.length; i++) if (data[i] !== prefix[i]) return false;
  return true;
}

/** The KeyType of an SPKI, or null for any other DER. */
export function keyType(spki) {
  for (const [kind, prefix, size] of KINDS) {
    if (spki.length === size && startsWith(spki, prefix)) return kind;
  }
  return null;
}

function spki(prefix, raw, size) {
  if (raw.length !== size) throw new RangeError(`raw key must be ${size} bytes, got ${raw.length}`);
  return concat(prefix, raw);
}

export const ed25519Spki = (raw32) => spki(ED25519_PREFIX, raw32, 32);
export const x25519Spki = (raw32) => spki(X25519_PREFIX, raw32, 32);
export const ed448Spki = (raw57) => spki(ED448_PREFIX, raw57, 57);

/** The raw public key inside a known SPKI. */
export function rawKey(der) {
  if (keyType(der) === null) throw new RangeError("unsupported key encoding");
  return der.subarray(12);
}
