// Blocks and batches (docs/protocol.md, "Blocks and batches").
//
// Every unit on the wire is a block of exactly BLOCK_SIZE bytes:
// word16 L | content | '#' padding. After the handshake the content is a batch,
// count (1..255) | count * (word16 tLen | transmission), consumed exactly.
// Senders pack transmissions in order while the sum of 2 + tLen stays within
// BATCH_LIMIT (16384 - 19: length, count and 16 bytes kept for a later block MAC).

import { BLOCK, LARGE_MSG, ProtocolError } from "./errors.js";

export const BLOCK_SIZE = 16384;
export const MAX_CONTENT = BLOCK_SIZE - 2;
export const MAX_BATCH = 255;
export const BATCH_LIMIT = BLOCK_SIZE - 19; // 16365
export const MAX_TRANSMISSION_SIZE = BATCH_LIMIT - 2; // 16363
const PAD = 0x23; // '#'

/** One full block around `content` (a hello or an encoded batch). */
export function padBlock(content) {
  if (content.length > MAX_CONTENT) {
    throw new ProtocolError(LARGE_MSG, `block content of ${content.length} bytes`);
  }
  const block = new Uint8Array(BLOCK_SIZE).fill(PAD);
  block[0] = content.length >> 8;
  block[1] = content.length & 255;
  block.set(content, 2);
  return block;
}

/** The content of a block; ProtocolError(BLOCK) if the size or length is wrong. */
export function unpadBlock(block) {
  if (block.length !== BLOCK_SIZE) throw new ProtocolError(BLOCK, `block of ${block.length} bytes`);
  const n = (block[0] << 8) | block[1];
  if (n > MAX_CONTENT) throw new ProtocolError(BLOCK, "content length exceeds block");
  return block.subarray(2, 2 + n);
}

/** The transmissions of a batch block, in order; ProtocolError(BLOCK) on any defect. */
export function decodeBatch(block) {
  const content = unpadBlock(block);
  if (content.length === 0 || content[0] === 0) throw new ProtocolError(BLOCK, "empty batch");
  const out = [];
  let pos = 1;
  for (let i = 0; i < content[0]; i++) {
    const start = pos + 2;
    if (start > content.length) throw new ProtocolError(BLOCK, "truncated batch");
    const end = start + ((content[pos] << 8) | content[pos + 1]);
    if (end > content.length) throw new ProtocolError(BLOCK, "truncated transmission");
    out.push(content.subarray(start, end));
    pos = end;
  }
  if (pos !== content.length) throw new ProtocolError(BLOCK, "bytes after the last transmission");
  return out;
}

/** Collects transmissions for one block, in order, while they fit. */
export class BatchPacker {
  constructor() {
    this.parts = [];
    this.size = 0; // sum of 2 + tLen, compared with BATCH_LIMIT
  }

  get length() {
    return this.parts.length;
  }

  /** Append if it fits; false (nothing added) when it does not. */
  add(transmission) {
    const n = transmission.length;
    if (n > MAX_TRANSMISSION_SIZE) {
      throw new ProtocolError(LARGE_MSG, `transmission of ${n} bytes`);
    }
    if (this.parts.length >= MAX_BATCH || this.size + 2 + n > BATCH_LIMIT) return false;
    this.parts.push(transmission);
    this.size += 2 + n;
    return true;
  }

  /** The padded block of everything added so far; the packer is empty afterwards. */
  takeBlock() {
    if (!this.parts.length) throw new RangeError("no transmissions to pack");
    const block = new Uint8Array(BLOCK_SIZE).fill(PAD);
    const length = 1 + this.size;
    block[0] = length >> 8;
    block[1] = length & 255;
    block[2] = this.parts.length;
    let pos = 3;
    for (const t of this.parts) {
      block[pos] = t.length >> 8;
      block[pos + 1] = t.length & 255;
      block.set(t, pos + 2);
      pos += 2 + t.length;
    }
    this.parts = [];
    this.size = 0;
    return block;
  }
}

/** Pack `transmissions` in order into as few padded blocks as the rule allows. */
export function encodeBatches(transmissions) {
  const packer = new BatchPacker();
  const blocks = [];
  for (const t of transmissions) {
    if (!packer.add(t)) {
      blocks.push(packer.takeBlock());
      packer.add(t);
    }
  }
  if (packer.length) blocks.push(packer.takeBlock());
  return blocks;
}
