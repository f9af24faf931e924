// Handshake blocks (docs/protocol.md, "Handshake").
//
//   serverHello = word16 minVer | word16 maxVer | ss(sessionId) | [certChain signedKey] | ignored
//   clientHello = word16 version | ss(keyHash) | [ss(client X25519 SPKI)] | ignored
//
// Hellos are block content (not padded). Failures throw ProtocolError(HANDSHAKE).

import { concat } from "./bytes.js";
import { Parser, large, ss, word16 } from "./encoding.js";
import { HANDSHAKE, ProtocolError } from "./errors.js";

export const SMP_VERSION_MIN = 9;
export const SMP_VERSION_MAX = 10;
const AUTH_KEY_VERSION = 7; // the hello fields after sessionId / keyHash exist from here on

/** {minVersion, maxVersion, sessionId, certChain: [], signedKey: null | bytes}. */
export function decodeServerHello(data) {
  const p = new Parser(data, 0, HANDSHAKE);
  const minVersion = p.word16();
  const maxVersion = p.word16();
  const sessionId = p.shortString();
  const hello = { minVersion, maxVersion, sessionId, certChain: [], signedKey: null };
  if (maxVersion >= AUTH_KEY_VERSION && !p.atEnd()) {
    // Parsed with backtracking, as the reference does: a part that does not parse is absent.
    try {
      const n = p.byte();
      const chain = [];
      for (let i = 0; i < n; i++) chain.push(p.large());
      const signedKey = p.large();
      if (chain.length) Object.assign(hello, { certChain: chain, signedKey });
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
    }
  }
  return hello;
}

export function encodeServerHello({ minVersion, maxVersion, sessionId, certChain = [], signedKey = null }) {
  const parts = [word16(minVersion), word16(maxVersion), ss(sessionId)];
  if (certChain.length || signedKey) {
    if (!certChain.length || !signedKey || certChain.length > 255) {
      throw new RangeError("a cert part needs 1..255 certificates and a signed key");
    }
    parts.push(Uint8Array.of(certChain.length), ...certChain.map(large), large(signedKey));
  }
  return concat(...parts);
}

export function encodeClientHello({ version, keyHash, clientKey = null }) {
  const parts = [word16(version), ss(keyHash)];
  if (clientKey) parts.push(ss(clientKey));
  return concat(...parts);
}

/** {version, keyHash, clientKey}: what the router reads (for tests). */
export function decodeClientHello(data) {
  const p = new Parser(data, 0, HANDSHAKE);
  const version = p.word16();
  const keyHash = p.shortString();
  let clientKey = null;
  if (version >= AUTH_KEY_VERSION && !p.atEnd()) {
    const start = p.pos;
    try {
      clientKey = p.dhKey();
    } catch {
      p.pos = start;
    }
  }
  return { version, keyHash, clientKey };
}

/** The highest version both ranges contain, or null if they do not meet. */
export function negotiateVersion(serverMin, serverMax, clientMin, clientMax) {
  const low = Math.max(serverMin, clientMin);
  const high = Math.min(serverMax, clientMax);
  return low <= high ? high : null;
}
