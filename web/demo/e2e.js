// End-to-end encryption of the demo's chat: NaCl box (X25519, XSalsa20-Poly1305)
// between the two pages, so the router only ever holds ciphertext.
//
// The inviter puts its public key in the invitation link (in the fragment,
// which browsers never send to a server). The joiner's first message, the
// hello, carries the joiner's public key in the clear and everything else
// boxed to the inviter; from then on both sides box every message with the key
// they share. Each SEND body is an envelope:
//
//   hello:    0x01 | joiner's public key (32) | nonce (24) | box
//   message:  0x02 | nonce (24) | box
//
// The boxed plain text is the JSON document, padded to a multiple of 256
// bytes so that the router does not learn the length of each text either.

import nacl from "tweetnacl";

const HELLO = 0x01;
const MESSAGE = 0x02;
const NONCE = nacl.box.nonceLength; // 24
const KEY = nacl.box.publicKeyLength; // 32
const PAD_TO = 256;

/** A fresh key pair: {publicKey, secretKey}, 32 bytes each. */
export function newKeyPair() {
  const pair = nacl.box.keyPair();
  return { publicKey: pair.publicKey, secretKey: pair.secretKey };
}

/** The key two sides share: their own secret key and the other's public key. */
export function sharedKey(theirPublicKey, mySecretKey) {
  if (theirPublicKey.length !== KEY) throw new Error("a public key is 32 bytes");
  return nacl.box.before(theirPublicKey, mySecretKey);
}

function pad(bytes) {
  const size = Math.ceil((bytes.length + 4) / PAD_TO) * PAD_TO;
  const out = new Uint8Array(size);
  new DataView(out.buffer).setUint32(0, bytes.length);
  out.set(bytes, 4);
  return out;
}

function unpad(padded) {
  if (padded.length < 4) return null;
  const length = new DataView(padded.buffer, padded.byteOffset).getUint32(0);
  return length + 4 <= padded.length ? padded.slice(4, 4 + length) : null;
}

function box(plain, key) {
  const nonce = nacl.randomBytes(NONCE);
  return { nonce, sealed: nacl.box.after(pad(plain), nonce, key) };
}

/** The joiner's hello: its public key, and `plain` boxed for the inviter. */
export function sealHello(plain, myPublicKey, key) {
  const { nonce, sealed } = box(plain, key);
  const out = new Uint8Array(1 + KEY + NONCE + sealed.length);
  out[0] = HELLO;
  out.set(myPublicKey, 1);
  out.set(nonce, 1 + KEY);
  out.set(sealed, 1 + KEY + NONCE);
  return out;
}

/** A message boxed with the shared key. */
export function seal(plain, key) {
  const { nonce, sealed } = box(plain, key);
  const out = new Uint8Array(1 + NONCE + sealed.length);
  out[0] = MESSAGE;
  out.set(nonce, 1);
  out.set(sealed, 1 + NONCE);
  return out;
}

/**
 * What an envelope holds: {kind: "hello", senderKey, open(key)} or
 * {kind: "message", open(key)}, where open returns the plain bytes or null
 * when the box does not open with that key; null for anything else.
 */
export function parseEnvelope(body) {
  if (body.length > 1 + KEY + NONCE && body[0] === HELLO) {
    const senderKey = body.slice(1, 1 + KEY);
    const nonce = body.subarray(1 + KEY, 1 + KEY + NONCE);
    const sealed = body.subarray(1 + KEY + NONCE);
    return { kind: "hello", senderKey, open: (key) => opened(sealed, nonce, key) };
  }
  if (body.length > 1 + NONCE && body[0] === MESSAGE) {
    const nonce = body.subarray(1, 1 + NONCE);
    const sealed = body.subarray(1 + NONCE);
    return { kind: "message", open: (key) => opened(sealed, nonce, key) };
  }
  return null;
}

function opened(sealed, nonce, key) {
  const plain = nacl.box.open.after(sealed, nonce, key);
  return plain ? unpad(plain) : null;
}
