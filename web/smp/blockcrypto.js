// Block encryption from v11 (docs/protocol.md#block-encryption): every block after
// the hellos is one box keyed by a chain that advances once per block.
//
//   (sndChain, rcvChain) = HKDF-SHA512(sessionId, X25519 secret, "SimpleXSbChainInit", 64)
//   (chain', key, nonce) = HKDF-SHA512("", chain, "SimpleXSbChain", 88)      ; 32 | 32 | 24
//   block = tag | XSalsa20-Poly1305(HSalsa20(key, 0^16), nonce, word16 L | content | '#'...)
//
// The router sends with the first chain, the client with the second.

import { concat, latin1 } from "./bytes.js";
import { BLOCK_SIZE } from "./block.js";
import { BLOCK, LARGE_MSG, ProtocolError } from "./errors.js";
import nacl from "./nacl.js";

const TAG_SIZE = 16;
const PADDED_SIZE = BLOCK_SIZE - TAG_SIZE; // 16368
const MAX_CONTENT = PADDED_SIZE - 2;
const HASH_BLOCK = 128; // SHA-512's block size
const INIT_INFO = latin1("SimpleXSbChainInit");
const STEP_INFO = latin1("SimpleXSbChain");

function hmacSha512(key, data) {
  let k = key.length > HASH_BLOCK ? nacl.hash(key) : key;
  const padded = new Uint8Array(HASH_BLOCK);
  padded.set(k);
  const inner = padded.map((b) => b ^ 0x36);
  const outer = padded.map((b) => b ^ 0x5c);
  return nacl.hash(concat(outer, nacl.hash(concat(inner, data))));
}

/** RFC 5869 with SHA-512. */
export function hkdfSha512(salt, ikm, info, length) {
  const prk = hmacSha512(salt, ikm);
  const out = [];
  let block = new Uint8Array(0);
  let total = 0;
  for (let counter = 1; total < length; counter++) {
    block = hmacSha512(prk, concat(block, info, Uint8Array.of(counter)));
    out.push(block);
    total += block.length;
  }
  return concat(...out).subarray(0, length);
}

/** The router's [send, receive] chain keys; a client uses them swapped. */
export function chainInit(sessionId, dhSecret) {
  const out = hkdfSha512(sessionId, dhSecret, INIT_INFO, 64);
  return [out.slice(0, 32), out.slice(32, 64)];
}

/** [next chain key, box key, nonce] for one block. */
export function chainStep(chainKey) {
  const out = hkdfSha512(new Uint8Array(0), chainKey, STEP_INFO, 88);
  return [out.slice(0, 32), out.slice(32, 64), out.slice(64, 88)];
}

function boxKey(key) {
  const out = new Uint8Array(32);
  nacl.lowlevel.crypto_core_hsalsa20(out, new Uint8Array(16), key, latin1("expand 32-byte k"));
  return out;
}

export function sealBlock(content, key, nonce) {
  if (content.length > MAX_CONTENT) throw new ProtocolError(LARGE_MSG, `block content of ${content.length} bytes`);
  const padded = new Uint8Array(PADDED_SIZE).fill(0x23);
  padded[0] = content.length >> 8;
  padded[1] = content.length & 255;
  padded.set(content, 2);
  return nacl.secretbox(padded, nonce, boxKey(key)); // tag first, as libsodium's easy form
}

export function openBlock(block, key, nonce) {
  if (block.length !== BLOCK_SIZE) throw new ProtocolError(BLOCK, `block of ${block.length} bytes`);
  const padded = nacl.secretbox.open(block, nonce, boxKey(key));
  if (!padded) throw new ProtocolError(BLOCK, "block does not decrypt");
  const n = (padded[0] << 8) | padded[1];
  if (n > MAX_CONTENT) throw new ProtocolError(BLOCK, "content length exceeds block");
  return padded.subarray(2, 2 + n);
}

/** The two chains of one connection; each seal or open advances its own chain. */
export class BlockCipher {
  constructor(sendChain, receiveChain) {
    this.sendChain = sendChain;
    this.receiveChain = receiveChain;
  }

  static forRouter(sessionId, dhSecret) {
    const [send, receive] = chainInit(sessionId, dhSecret);
    return new BlockCipher(send, receive);
  }

  static forClient(sessionId, dhSecret) {
    const [send, receive] = chainInit(sessionId, dhSecret);
    return new BlockCipher(receive, send);
  }

  seal(content) {
    const [next, key, nonce] = chainStep(this.sendChain);
    this.sendChain = next;
    return sealBlock(content, key, nonce);
  }

  open(block) {
    const [next, key, nonce] = chainStep(this.receiveChain);
    this.receiveChain = next;
    return openBlock(block, key, nonce);
  }
}
