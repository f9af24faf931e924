// SMP error values and the exceptions of the codec and the client.
//
// An SMP error (what follows `ERR ` on the wire, docs/protocol.md "Errors") is
// kept as its wire text: "AUTH", "QUOTA", "CMD SYNTAX", "STORE disk full".

import { fromLatin1, fromUtf8, latin1, utf8 } from "./bytes.js";

export const BLOCK = "BLOCK";
export const AUTH = "AUTH";
export const QUOTA = "QUOTA";
export const NO_MSG = "NO_MSG";
export const LARGE_MSG = "LARGE_MSG";
export const CRYPTO = "CRYPTO";
export const CMD_SYNTAX = "CMD SYNTAX";
export const CMD_UNKNOWN = "CMD UNKNOWN";
export const CMD_PROHIBITED = "CMD PROHIBITED";
/** A hello that does not parse: never sent in ERR, the connection just ends. */
export const HANDSHAKE = "HANDSHAKE";

/** Raised inside the codec when bytes do not parse; `type` is the ERR it stands for. */
export class ProtocolError extends Error {
  constructor(type, detail = "") {
    super(detail ? `${type}: ${detail}` : type);
    this.name = "ProtocolError";
    this.type = type;
  }
}

/** Base class of every error the client raises. */
export class SMPClientError extends Error {}

/** The router answered `ERR type` (or the client refused the command locally). */
export class SMPError extends SMPClientError {
  constructor(type) {
    super(type);
    this.type = type;
  }
}

/** The connection is closed, could not be opened, or broke. */
export class ConnectionClosed extends SMPClientError {
  constructor(reason, { local = false } = {}) {
    super(reason);
    this.reason = reason;
    this.local = local;
  }
}

/** The SMP handshake failed: unusable hello, no common version, wrong identity. */
export class HandshakeError extends ConnectionClosed {}

/**
 * The router's identity certificate does not hash to the key hash the client
 * was given: a wrong address, or another router at it. Thrown before the
 * client sends its hello (docs/protocol.md, "Identity in the server hello").
 * A HandshakeError too, so code that catches those still catches this one.
 */
export class IdentityMismatch extends HandshakeError {}

/** The router sent something that does not parse or does not answer the command. */
export class BadResponse extends SMPClientError {}

/**
 * No answer to a command within its timeout. The connection stays open: a
 * late answer is dropped (or, for a MSG answering SUB or ACK, still handed
 * over as an event).
 */
export class CommandTimeout extends SMPClientError {}

// Error names written out: a minifying bundler renames classes, and
// `error.name` must still say what the error is.
for (const [cls, name] of [
  [SMPClientError, "SMPClientError"], [SMPError, "SMPError"], [ConnectionClosed, "ConnectionClosed"],
  [HandshakeError, "HandshakeError"], [IdentityMismatch, "IdentityMismatch"], [BadResponse, "BadResponse"],
  [CommandTimeout, "CommandTimeout"],
]) {
  Object.defineProperty(cls.prototype, "name", { value: name, writable: true, configurable: true });
}

const SIMPLE = new Set([
  "BLOCK", "SESSION", "AUTH", "QUOTA", "NO_MSG", "LARGE_MSG", "INTERNAL",
  "CRYPTO", "SERVICE", "EXPIRED", "DUPLICATE_",
]);
const CMD_ERRORS = new Set(["UNKNOWN", "SYNTAX", "PROHIBITED", "NO_AUTH", "HAS_AUTH", "NO_ENTITY"]);

function syntax(detail) {
  return new ProtocolError(CMD_SYNTAX, detail);
}

/** Split at the first space: [token, rest or null]. */
function token(text) {
  const i = text.indexOf(" ");
  return i < 0 ? [text, null] : [text.slice(0, i), text.slice(i + 1)];
}

/** The error type of an `ERR` payload; ProtocolError(CMD SYNTAX) if it is not one. */
export function decodeError(bytes) {
  const text = fromLatin1(bytes);
  const [tag, rest] = token(text);
  if (SIMPLE.has(tag)) {
    if (rest !== null) throw syntax("trailing bytes after error");
    return tag;
  }
  if (rest === null) throw syntax("unknown error");
  if (tag === "CMD") {
    if (rest === "NO_QUEUE") return "CMD NO_ENTITY"; // the old name, still read
    if (!CMD_ERRORS.has(rest)) throw syntax("bad command error");
    return text;
  }
  if (tag === "PROXY") {
    checkProxyError(rest);
    return text;
  }
  if (tag === "STORE") return `STORE ${utf8Text(bytes.subarray(6))}`;
  if (tag === "BLOCKED") {
    const info = utf8Text(bytes.subarray(8));
    const ok = ["reason=spam", "reason=content"].some(
      (r) => info === r || info.startsWith(`${r},notice=`),
    );
    if (!ok) throw syntax("bad block info");
    return `BLOCKED ${info}`;
  }
  throw syntax("unknown error");
}

function utf8Text(bytes) {
  try {
    return fromUtf8(bytes);
  } catch {
    throw syntax("invalid UTF-8");
  }
}

/** The wire bytes of an error type (STORE and BLOCKED text as UTF-8). */
export function encodeError(type) {
  if (type.startsWith("STORE ") || type.startsWith("BLOCKED ")) return utf8(type);
  return latin1(type);
}

const PROXY_SIMPLE = new Set(["BASIC_AUTH", "NO_SESSION"]);
const BROKER_SIMPLE = new Set(["TIMEOUT", "HOST", "NO_SERVICE", "NETWORK"]);
const TRANSPORT_SIMPLE = new Set(["BLOCK", "VERSION", "LARGE_MSG", "SESSION", "NO_AUTH"]);
const HANDSHAKE_ERRORS = new Set(["PARSE", "IDENTITY", "BAD_AUTH", "BAD_SERVICE"]);
const NET_SIMPLE = new Set(["UNKNOWNCA", "FAILED", "TIMEOUT"]);
const NET_WITH_TEXT = new Set(["CONNECT", "TLS", "SUBSCRIBE"]);

/** `text` (Latin-1) must be exactly one short string. */
function exactShortString(text) {
  if (!text.length || text.charCodeAt(0) + 1 !== text.length) throw syntax("bad short string");
}

function checkProxyError(text) {
  // PROTOCOL nests a whole error type: walked in a loop, not by recursion.
  for (;;) {
    const [tag, rest] = token(text);
    if (PROXY_SIMPLE.has(tag) && rest === null) return;
    if (rest === null) throw syntax("bad proxy error");
    if (tag === "BROKER") return checkBrokerError(rest);
    if (tag !== "PROTOCOL") throw syntax("bad proxy error");
    const [inner, innerRest] = token(rest);
    if (inner !== "PROXY" || innerRest === null) {
      decodeError(latin1(rest));
      return;
    }
    text = innerRest;
  }
}

function checkBrokerError(text) {
  const [tag, rest] = token(text);
  if (rest === null) {
    if (BROKER_SIMPLE.has(tag)) return;
    throw syntax("bad broker error");
  }
  if (tag === "RESPONSE" || tag === "UNEXPECTED") return exactShortString(rest);
  if (tag === "TRANSPORT") {
    if (TRANSPORT_SIMPLE.has(rest)) return;
    const [t, r] = token(rest);
    if (t === "HANDSHAKE" && HANDSHAKE_ERRORS.has(r)) return;
    throw syntax("bad transport error");
  }
  if (tag === "NETWORK") {
    if (NET_SIMPLE.has(rest)) return;
    const [t, r] = token(rest);
    if (NET_WITH_TEXT.has(t) && r !== null) return exactShortString(r);
    throw syntax("bad network error");
  }
  throw syntax("bad broker error");
}
