// Handshake blocks (docs/protocol.md, "Handshake").
//
//   serverHello = word16 minVer | word16 maxVer | ss(sessionId) | [certChain signedKey [ss(webProof)]] | ignored
//   clientHello = word16 version | ss(keyHash) | [ss(client X25519 SPKI)] | [proxyServer] | [clientService]
//                 | [serviceExt] | ignored
//
// (web proof from maxVer 19, proxyServer from 14, clientService from 16: versions.js).
// Hellos are block content (not padded). Failures throw ProtocolError(HANDSHAKE).

import { concat } from "./bytes.js";
import { Parser, large, ss, word16 } from "./encoding.js";
import { HANDSHAKE, ProtocolError } from "./errors.js";
import { KeyType, keyType } from "./keys.js";
import * as versions from "./versions.js";

// The range this client asks for (docs/protocol.md#versions).
export const SMP_VERSION_MIN = versions.CODEC_VERSION_MIN;
export const SMP_VERSION_MAX = versions.CODEC_VERSION_MAX;
export const SERVICE_MARKER = Uint8Array.of(0x53, 0x56, 0x43, 0x31); // "SVC1"
const SERVICE_CONTEXT = Uint8Array.of(0x53, 0x4d, 0x50, 0x2d, 0x53, 0x45, 0x52, 0x56, 0x49, 0x43, 0x45); // "SMP-SERVICE"

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

/**
 * The client hello. `service` ({serviceKey, signature}, see crypto.proveService)
 * is the service extension of docs/protocol.md; it needs `clientKey` before it.
 */
export function encodeClientHello({ version, keyHash, clientKey = null, service = null }) {
  const parts = [word16(version), ss(keyHash)];
  if (clientKey) parts.push(ss(clientKey));
  if (versions.hasProxyServerFlag(version)) parts.push(Uint8Array.of(0x46)); // proxyServer F
  if (versions.hasServiceField(version)) parts.push(Uint8Array.of(0x30)); // clientService: none
  if (service) {
    if (!clientKey) throw new RangeError("the service extension needs the client key before it");
    parts.push(SERVICE_MARKER, ss(service.serviceKey), ss(service.signature));
  }
  return concat(...parts);
}

/** {version, keyHash, clientKey, service}: what the router reads (for tests). */
export function decodeClientHello(data) {
  const p = new Parser(data, 0, HANDSHAKE);
  const version = p.word16();
  const keyHash = p.shortString();
  let clientKey = null;
  let service = null;
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
  const marker = p.data.subarray(p.pos, p.pos + SERVICE_MARKER.length);
  if (clientKey && marker.length === SERVICE_MARKER.length && marker.every((b, i) => b === SERVICE_MARKER[i])) {
    p.pos += SERVICE_MARKER.length;
    const serviceKey = p.shortString();
    const signature = p.shortString();
    if (keyType(serviceKey) !== KeyType.ED25519 || signature.length !== 64) {
      throw p.fail("service key must be Ed25519 with a 64-byte signature");
    }
    service = { serviceKey, signature };
  }
  return { version, keyHash, clientKey, service };
}

/** What the router's online key signs for a web client (docs/protocol.md#web-identity-proof). */
export function webProofSignedBytes(challenge, sessionId) {
  return concat(challenge, sessionId);
}

/** What the service key signs in the client hello. */
export function serviceSignedBytes(sessionId, keyHash, serviceKey) {
  return concat(SERVICE_CONTEXT, ss(sessionId), ss(keyHash), ss(serviceKey));
}

/** The highest version both ranges contain, or null if they do not meet. */
export function negotiateVersion(serverMin, serverMax, clientMin, clientMax) {
  const low = Math.max(serverMin, clientMin);
  const high = Math.min(serverMax, clientMax);
  return low <= high ? high : null;
}
