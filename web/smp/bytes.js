// Byte helpers shared by the codec and the client: Uint8Array in, Uint8Array out.

const textEncoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/**
 * UTF-8 bytes of a string.
 * @param {string} text
 * @returns {Uint8Array}
 */
export function utf8(text) {
  return textEncoder.encode(text);
}

/**
 * A string from UTF-8 bytes; throws TypeError if they are not UTF-8.
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function fromUtf8(bytes) {
  return strictDecoder.decode(bytes);
}

/**
 * Bytes whose values are the char codes of `text` (each below 256).
 * @param {string} text
 * @returns {Uint8Array}
 */
export function latin1(text) {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 255) throw new RangeError("not a Latin-1 string");
    out[i] = c;
  }
  return out;
}

/**
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function fromLatin1(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    s += String.fromCharCode(...bytes.subarray(i, i + 8192));
  }
  return s;
}

/**
 * One Uint8Array of all `parts` (Uint8Arrays or arrays of byte values).
 * @param {...(Uint8Array | ArrayLike<number>)} parts
 * @returns {Uint8Array}
 */
export function concat(...parts) {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.length;
  }
  return out;
}

/**
 * @param {Uint8Array} a
 * @param {Uint8Array} b
 * @returns {boolean}
 */
export function equal(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function toHex(bytes) {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

/**
 * Bytes from hex; spaces are allowed between bytes.
 * @param {string} hex
 * @returns {Uint8Array}
 */
export function fromHex(hex) {
  const clean = hex.replace(/\s+/g, "");
  if (clean.length % 2 || /[^0-9a-fA-F]/.test(clean)) throw new SyntaxError("bad hex");
  const out = new Uint8Array(clean.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(clean.slice(2 * i, 2 * i + 2), 16);
  return out;
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/**
 * base64url, with '=' padding when `pad` (the form of SMP addresses).
 * @param {Uint8Array} bytes
 * @param {boolean} [pad]
 * @returns {string}
 */
export function toBase64url(bytes, pad = false) {
  const alphabet = B64 + "-_";
  let s = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    s += alphabet[n >> 18] + alphabet[(n >> 12) & 63] + alphabet[(n >> 6) & 63] + alphabet[n & 63];
  }
  const left = bytes.length - i;
  if (left === 1) {
    const n = bytes[i] << 16;
    s += alphabet[n >> 18] + alphabet[(n >> 12) & 63] + (pad ? "==" : "");
  } else if (left === 2) {
    const n = (bytes[i] << 16) | (bytes[i + 1] << 8);
    s += alphabet[n >> 18] + alphabet[(n >> 12) & 63] + alphabet[(n >> 6) & 63] + (pad ? "=" : "");
  }
  return s;
}

/**
 * Bytes from base64url or base64, padded or not; throws SyntaxError otherwise.
 * @param {string} text
 * @returns {Uint8Array}
 */
export function fromBase64url(text) {
  const clean = text.replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
  if (/[^A-Za-z0-9_-]/.test(clean) || clean.length % 4 === 1) {
    throw new SyntaxError("bad base64url");
  }
  const alphabet = B64 + "-_";
  const out = new Uint8Array(Math.floor((clean.length * 3) / 4));
  let bits = 0;
  let value = 0;
  let pos = 0;
  for (const ch of clean) {
    value = (value << 6) | alphabet.indexOf(ch);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[pos++] = (value >> bits) & 255;
    }
  }
  return out;
}
