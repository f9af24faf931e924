// Handshake blocks (docs/protocol.md, "Handshake").
//
//   serverHello = word16 minVer | word16 maxVer | ss(sessionId) | [certChain signedKey [ss(webProof)]] | ignored
//   clientHello = word16 version | ss(keyHash) | [ss(client X25519 SPKI)] | [proxyServer] | [clientService]
//                 | ignored
//
// (web proof from maxVer 19, proxyServer from 14, clientService from 16: versions.js).
// Hellos are block content (not padded). Failures throw ProtocolError(HANDSHAKE).

import { concat } from "./bytes.js";
import { Parser, large, ss, word16 } from "./encoding.js";
import { HANDSHAKE, ProtocolError } from "./errors.js";
import * as versions from "./versions.js";

// The range this client asks for (docs/protocol.md#versions).
export const SMP_VERSION_MIN = versions.CODEC_VERSION_MIN;
export const SMP_VERSION_MAX = versions.CODEC_VERSION_MAX;

/** {minVersion, maxVersion, sessionId, certChain: [], signedKey: null | bytes, webProof: null | bytes}. */
export function decodeServerHello(data) {
  const p = new Parser(data, 0, HANDSHAKE);
  const minVersion = p.word16();
  const maxVersion = p.word16();
  const sessionId = p.shortString();
  const hello = { minVersion, maxVersion, sessionId, certChain: [], signedKey: null };
  if (versions.hasWebIdentityProof(maxVersion)) hello.webProof = null;
  if (versions.hasHelloKeys(maxVersion) && !p.atEnd()) {
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
    if (hello.certChain.length && versions.hasWebIdentityProof(maxVersion) && !p.atEnd()) {
      try {
        const proof = p.shortString();
        if (proof.length === 64 || proof.length === 114) hello.webProof = proof;
      } catch (e) {
        if (!(e instanceof ProtocolError)) throw e;
      }
    }
  }
  return hello;
}

export function encodeServerHello({ minVersion, maxVersion, sessionId, certChain = [], signedKey = null, webProof = null }) {
  const parts = [word16(minVersion), word16(maxVersion), ss(sessionId)];
  if (certChain.length || signedKey) {
    if (!certChain.length || !signedKey || certChain.length > 255) {
      throw new RangeError("a cert part needs 1..255 certificates and a signed key");
    }
    parts.push(Uint8Array.of(certChain.length), ...certChain.map(large), large(signedKey));
  }
  if (webProof) parts.push(ss(webProof));
  return concat(...parts);
}

/**
 * The certificate whose SHA-256 is the router's key hash: the second of a
 * longer chain (TLS chains put the identity after the leaf), the only one of
 * a chain of one (this router's hello), null for an empty chain.
 */
export function identityCertificate(certChain) {
  if (!certChain.length) return null;
  return certChain.length > 1 ? certChain[1] : certChain[0];
}

/** The client hello; a browser acts for no service, so its clientService is "0". */
export function encodeClientHello({ version, keyHash, clientKey = null }) {
  const parts = [word16(version), ss(keyHash)];
  if (clientKey) parts.push(ss(clientKey));
  if (versions.hasProxyServerFlag(version)) parts.push(Uint8Array.of(0x46)); // proxyServer F
  if (versions.hasServiceField(version)) parts.push(Uint8Array.of(0x30)); // clientService: none
  return concat(...parts);
}

/** {version, keyHash, clientKey}: what the router reads (for tests); trailing bytes are ignored. */
export function decodeClientHello(data) {
  const p = new Parser(data, 0, HANDSHAKE);
  const version = p.word16();
  const keyHash = p.shortString();
  let clientKey = null;
  if (versions.hasHelloKeys(version) && !p.atEnd()) {
    const start = p.pos;
    try {
      clientKey = p.dhKey();
    } catch {
      p.pos = start;
    }
  }
  if (versions.hasProxyServerFlag(version)) p.bool();
  if (versions.hasServiceField(version) && p.byte() !== 0x30) throw p.fail("clientService is not read here");
  return { version, keyHash, clientKey };
}

/** What the router's online key signs for a web client (docs/protocol.md#web-identity-proof). */
export function webProofSignedBytes(challenge, sessionId) {
  return concat(challenge, sessionId);
}

/** The highest version both ranges contain, or null if they do not meet. */
export function negotiateVersion(serverMin, serverMax, clientMin, clientMax) {
  const low = Math.max(serverMin, clientMin);
  const high = Math.min(serverMax, clientMax);
  return low <= high ? high : null;
}
