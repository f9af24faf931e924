// Primitive SMP encodings (docs/protocol.md, notation): a parsing cursor and encoders.
//
// Every parse failure throws ProtocolError with the error the caller asked for
// (CMD SYNTAX by default), so a layer that must fail a handshake builds its
// Parser with HANDSHAKE instead of catching and re-throwing. Encoders throw
// RangeError for values the wire cannot carry: that is the sender's bug.

import { CMD_SYNTAX, ProtocolError } from "./errors.js";
import { KeyType, keyType } from "./keys.js";

export class Parser {
  constructor(data, pos = 0, error = CMD_SYNTAX) {
    this.data = data;
    this.pos = pos;
    this.error = error;
  }

  fail(detail = "") {
    return new ProtocolError(this.error, detail);
  }

  take(n) {
    const end = this.pos + n;
    if (n < 0 || end > this.data.length) throw this.fail("unexpected end of input");
    const out = this.data.subarray(this.pos, end);
    this.pos = end;
    return out;
  }

  byte() {
    if (this.pos >= this.data.length) throw this.fail("unexpected end of input");
    return this.data[this.pos++];
  }

  char(expected) {
    if (this.byte() !== expected) throw this.fail(`expected ${String.fromCharCode(expected)}`);
  }

  space() {
    this.char(0x20);
  }

  word16() {
    const b = this.take(2);
    return (b[0] << 8) | b[1];
  }

  /** A signed 64-bit big-endian integer, as a Number (exact up to 2^53). */
  int64() {
    const b = this.take(8);
    return Number(new DataView(b.buffer, b.byteOffset, 8).getBigInt64(0));
  }

  shortString() {
    return this.take(this.byte());
  }

  large() {
    return this.take(this.word16());
  }

  bool() {
    const b = this.byte();
    if (b === 0x54) return true;
    if (b === 0x46) return false;
    throw this.fail("expected T or F");
  }

  maybe(read) {
    const b = this.byte();
    if (b === 0x30) return null;
    if (b === 0x31) return read();
    throw this.fail("expected 0 or 1");
  }

  /** ss(SPKI DER) of a key type the protocol knows. */
  key() {
    const spki = this.shortString();
    if (keyType(spki) === null) throw this.fail("unknown key encoding");
    return spki;
  }

  /** ss(SPKI DER) that must be an X25519 key. */
  dhKey() {
    const spki = this.key();
    if (keyType(spki) !== KeyType.X25519) throw this.fail("DH key must be X25519");
    return spki;
  }

  rest() {
    const out = this.data.subarray(this.pos);
    this.pos = this.data.length;
    return out;
  }

  atEnd() {
    return this.pos >= this.data.length;
  }

  end() {
    if (this.pos !== this.data.length) throw this.fail("trailing bytes");
  }
}

/** ss(x): one length byte, then x. */
export function ss(bytes) {
  if (bytes.length > 255) throw new RangeError(`short string of ${bytes.length} bytes`);
  const out = new Uint8Array(1 + bytes.length);
  out[0] = bytes.length;
  out.set(bytes, 1);
  return out;
}

export function word16(n) {
  if (!(n >= 0 && n <= 0xffff)) throw new RangeError(`word16 out of range: ${n}`);
  return Uint8Array.of(n >> 8, n & 255);
}

export function int64(n) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(n));
  return out;
}

export function large(bytes) {
  const out = new Uint8Array(2 + bytes.length);
  out.set(word16(bytes.length));
  out.set(bytes, 2);
  return out;
}
