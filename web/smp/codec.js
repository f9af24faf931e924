// Commands and responses (docs/protocol.md, "Commands and responses").
//
// A command or response is TAG or TAG SP params. Values are plain objects with
// a `type` naming the wire tag: {type: "SEND", flags, body}, {type: "IDS", rcvId, ...}.
// Decoding an unknown tag throws ProtocolError(CMD UNKNOWN), anything else that
// does not parse (trailing bytes included) ProtocolError(CMD SYNTAX). Every function
// takes the negotiated version; what differs by version is decided in versions.js
// (docs/protocol.md#version-table).

import { concat, fromUtf8, latin1, utf8 } from "./bytes.js";
import { Parser, int64, large, ss } from "./encoding.js";
import { CMD_SYNTAX, CMD_UNKNOWN, ProtocolError, decodeError, encodeError } from "./errors.js";
import * as versions from "./versions.js";

export const MAX_MESSAGE_LENGTH = 16064; // SEND body limit at v9/v10; versions.maxMessageLength(v)
const MAX_SEND_FLAGS = 7; // 'T'/'F' plus up to 6 reserved bytes before the SP
const SP = 0x20;

const tagBytes = (tag) => latin1(tag);
const T = (b) => Uint8Array.of(b ? 0x54 : 0x46);

/** [tag, index of the SP after it or -1]; tags are at most 5 bytes. */
function splitTag(data) {
  const limit = Math.min(data.length, 6);
  for (let i = 0; i < limit; i++) {
    if (data[i] === SP) return [String.fromCharCode(...data.subarray(0, i)), i];
  }
  return [data.length <= 6 ? String.fromCharCode(...data) : "", -1];
}

function params(data, spaceAt) {
  if (spaceAt < 0) throw new ProtocolError(CMD_SYNTAX, "missing parameters");
  return new Parser(data, spaceAt + 1);
}

function noParams(type) {
  return (data, spaceAt) => {
    if (spaceAt >= 0) throw new ProtocolError(CMD_SYNTAX, "unexpected parameters");
    return { type };
  };
}

function decodeWith(parsers, data, version) {
  const [tag, spaceAt] = splitTag(data);
  const parse = Object.hasOwn(parsers, tag) ? parsers[tag] : undefined;
  if (!parse) throw new ProtocolError(CMD_UNKNOWN);
  return parse(data, spaceAt, version);
}

const maybeBytes = (x, encode) => (x == null ? latin1("0") : concat(latin1("1"), encode(x)));

// --- commands ----------------------------------------------------------------

// Printable characters other than space, '@', ':' and '/', judged on Latin-1.
function isPasswordByte(b) {
  if (b <= 0x20 || b === 0x7f || (b >= 0x80 && b <= 0xa0) || b === 0xad) return false;
  return b !== 0x40 && b !== 0x3a && b !== 0x2f;
}

function parseNew(data, i, v) {
  const p = params(data, i);
  const rcvAuthKey = p.key();
  const rcvDhKey = p.dhKey();
  const basicAuth = p.maybe(() => {
    const pw = p.shortString();
    if (!pw.every(isPasswordByte)) throw p.fail("invalid character in basic auth");
    return pw;
  });
  const mode = p.byte();
  if (mode !== 0x53 && mode !== 0x43) throw p.fail("subMode must be S or C");
  let sndSecure = null;
  let link = null;
  let notifier = null;
  if (versions.hasShortLinks(v)) {
    const request = p.maybe(() => {
      const qm = p.byte();
      if (qm !== 0x4d && qm !== 0x43) throw p.fail("queue mode must be M or C");
      const data = p.maybe(() => {
        const linkId = qm === 0x43 ? p.shortString() : null;
        const senderId = p.shortString();
        return { senderId, fixedData: p.large(), userData: p.large(), linkId };
      });
      return [qm === 0x4d, data];
    });
    if (request) [sndSecure, link] = request;
    if (versions.hasNewNotifier(v)) notifier = p.maybe(() => ({ notifierKey: p.key(), rcvNtfDhKey: p.dhKey() }));
  } else {
    sndSecure = p.bool();
    p.end();
    return { type: "NEW", rcvAuthKey, rcvDhKey, basicAuth, subscribe: mode === 0x53, sndSecure };
  }
  p.end();
  return { type: "NEW", rcvAuthKey, rcvDhKey, basicAuth, subscribe: mode === 0x53, sndSecure, link, notifier };
}

function parseKeyCommand(type) {
  return (data, i) => {
    const p = params(data, i);
    const senderKey = p.key();
    p.end();
    return { type, senderKey };
  };
}

function parseSend(data, i) {
  if (i < 0) throw new ProtocolError(CMD_SYNTAX, "missing parameters");
  const start = i + 1;
  let j = -1;
  for (let k = start; k < Math.min(data.length, start + MAX_SEND_FLAGS + 1); k++) {
    if (data[k] === SP) {
      j = k;
      break;
    }
  }
  if (j <= start || (data[start] !== 0x54 && data[start] !== 0x46)) {
    throw new ProtocolError(CMD_SYNTAX, "bad SEND flags");
  }
  return { type: "SEND", flags: data.subarray(start, j), body: data.subarray(j + 1) };
}

function parseAck(data, i) {
  const p = params(data, i);
  const msgId = p.shortString();
  p.end();
  return { type: "ACK", msgId };
}

function parseNkey(data, i) {
  const p = params(data, i);
  const notifierKey = p.key();
  const rcvNtfDhKey = p.dhKey();
  p.end();
  return { type: "NKEY", notifierKey, rcvNtfDhKey };
}

const rawParams = (type) => (data, i) => ({ type, raw: i < 0 ? new Uint8Array(0) : data.subarray(i + 1) });

function parseLset(data, i) {
  const p = params(data, i);
  const linkId = p.shortString();
  const fixedData = p.large();
  const userData = p.large();
  p.end();
  return { type: "LSET", linkId, fixedData, userData };
}

const COMMAND_PARSERS = {
  PING: noParams("PING"),
  NEW: parseNew,
  SUB: noParams("SUB"),
  KEY: parseKeyCommand("KEY"),
  SKEY: parseKeyCommand("SKEY"),
  SEND: parseSend,
  ACK: parseAck,
  GET: noParams("GET"),
  OFF: noParams("OFF"),
  DEL: noParams("DEL"),
  QUE: noParams("QUE"),
  NKEY: parseNkey,
  NDEL: noParams("NDEL"),
  NSUB: noParams("NSUB"),
  SUBS: noParams("SUBS"),
  NSUBS: noParams("NSUBS"),
  PRXY: rawParams("PRXY"),
  PFWD: rawParams("PFWD"),
  LSET: parseLset,
  LDEL: noParams("LDEL"),
  LKEY: parseKeyCommand("LKEY"),
  LGET: noParams("LGET"),
};

/** One command from its bytes (what the router does; here for tests and tools). */
export function decodeCommand(data, version = versions.LEGACY_VERSION) {
  return decodeWith(COMMAND_PARSERS, data, version);
}

function sendFlags(flags) {
  const f = typeof flags === "string" ? latin1(flags) : flags;
  if (!f.length || f.length > MAX_SEND_FLAGS || (f[0] !== 0x54 && f[0] !== 0x46) || f.includes(SP)) {
    throw new RangeError("SEND flags are T or F and at most 6 more non-space bytes");
  }
  return f;
}

const withRaw = (tag, raw) => (raw.length ? concat(tagBytes(tag + " "), raw) : tagBytes(tag));

function encodeNewTail(cmd, v) {
  if (!versions.hasShortLinks(v)) return T(cmd.sndSecure);
  const link = (l) => concat(l.linkId ? ss(l.linkId) : new Uint8Array(0), ss(l.senderId), large(l.fixedData), large(l.userData));
  const request = cmd.sndSecure == null
    ? latin1("0")
    : concat(latin1("1"), latin1(cmd.sndSecure ? "M" : "C"), maybeBytes(cmd.link, link));
  if (!versions.hasNewNotifier(v)) return request;
  return concat(request, maybeBytes(cmd.notifier, (n) => concat(ss(n.notifierKey), ss(n.rcvNtfDhKey))));
}

/** The bytes of a command value at `version`. */
export function encodeCommand(cmd, version = versions.LEGACY_VERSION) {
  switch (cmd.type) {
    case "NEW":
      return concat(
        tagBytes("NEW "), ss(cmd.rcvAuthKey), ss(cmd.rcvDhKey),
        cmd.basicAuth == null ? latin1("0") : concat(latin1("1"), ss(cmd.basicAuth)),
        latin1(cmd.subscribe ? "S" : "C"), encodeNewTail(cmd, version),
      );
    case "LSET":
      return concat(tagBytes("LSET "), ss(cmd.linkId), large(cmd.fixedData), large(cmd.userData));
    case "KEY":
    case "SKEY":
    case "LKEY":
      return concat(tagBytes(cmd.type + " "), ss(cmd.senderKey));
    case "SEND":
      return concat(tagBytes("SEND "), sendFlags(cmd.flags), Uint8Array.of(SP), cmd.body);
    case "ACK":
      return concat(tagBytes("ACK "), ss(cmd.msgId));
    case "NKEY":
      return concat(tagBytes("NKEY "), ss(cmd.notifierKey), ss(cmd.rcvNtfDhKey));
    case "PRXY":
    case "PFWD":
      return withRaw(cmd.type, cmd.raw ?? new Uint8Array(0));
    case "PING": case "SUB": case "GET": case "OFF": case "DEL": case "QUE":
    case "NDEL": case "NSUB": case "SUBS": case "NSUBS": case "LDEL": case "LGET":
      return tagBytes(cmd.type);
    default:
      throw new RangeError(`unknown command ${cmd.type}`);
  }
}

// --- responses ---------------------------------------------------------------

function parseIds(data, i, v) {
  const p = params(data, i);
  const rcvId = p.shortString();
  const sndId = p.shortString();
  const srvDhKey = p.dhKey();
  if (!versions.hasShortLinks(v)) {
    const sndSecure = p.bool();
    p.end();
    return { type: "IDS", rcvId, sndId, srvDhKey, sndSecure };
  }
  const ids = { type: "IDS", rcvId, sndId, srvDhKey, sndSecure: null, linkId: null, serviceId: null, notifier: null };
  {
    const mode = p.maybe(() => p.byte());
    if (mode != null) {
      if (mode !== 0x4d && mode !== 0x43) throw p.fail("queue mode must be M or C");
      ids.sndSecure = mode === 0x4d;
    }
    ids.linkId = p.maybe(() => p.shortString());
    if (versions.hasServiceField(v)) ids.serviceId = p.maybe(() => p.shortString());
    if (versions.hasNewNotifier(v)) ids.notifier = p.maybe(() => ({ notifierId: p.shortString(), srvNtfDhKey: p.dhKey() }));
  }
  p.end();
  return ids;
}

function parseLnk(data, i) {
  const p = params(data, i);
  const senderId = p.shortString();
  const fixedData = p.large();
  const userData = p.large();
  p.end();
  return { type: "LNK", senderId, fixedData, userData };
}

function parseSok(data, i) {
  const p = params(data, i);
  const serviceId = p.maybe(() => p.shortString());
  p.end();
  return { type: "SOK", serviceId };
}

function parseMsg(data, i) {
  const p = params(data, i);
  const msgId = p.shortString();
  return { type: "MSG", msgId, encBody: p.rest() };
}

function parseNid(data, i) {
  const p = params(data, i);
  const notifierId = p.shortString();
  const srvNtfDhKey = p.dhKey();
  p.end();
  return { type: "NID", notifierId, srvNtfDhKey };
}

function parseNmsg(data, i) {
  const p = params(data, i);
  const nonce = p.take(24);
  const encMeta = p.shortString();
  p.end();
  return { type: "NMSG", nonce, encMeta };
}

function parseCount(type) {
  return (data, i) => {
    const p = params(data, i);
    const count = p.int64();
    p.end();
    return { type, count };
  };
}

function parseInfo(data, i) {
  const json = params(data, i).rest();
  try {
    return { type: "INFO", json: fromUtf8(json) };
  } catch {
    throw new ProtocolError(CMD_SYNTAX, "invalid UTF-8");
  }
}

function parseErr(data, i) {
  if (i < 0) throw new ProtocolError(CMD_SYNTAX, "missing error");
  return { type: "ERR", error: decodeError(data.subarray(i + 1)) };
}

const RESPONSE_PARSERS = {
  IDS: parseIds,
  MSG: parseMsg,
  NID: parseNid,
  NMSG: parseNmsg,
  END: noParams("END"),
  DELD: noParams("DELD"),
  OK: noParams("OK"),
  PONG: noParams("PONG"),
  INFO: parseInfo,
  ERR: parseErr,
  SOKS: parseCount("SOKS"),
  ENDS: parseCount("ENDS"),
  ALLS: noParams("ALLS"),
  LNK: parseLnk,
  SOK: parseSok,
};

/** One router message from its bytes, at `version`. */
export function decodeResponse(data, version = versions.LEGACY_VERSION) {
  return decodeWith(RESPONSE_PARSERS, data, version);
}

function encodeIdsTail(r, v) {
  if (!versions.hasShortLinks(v)) return T(r.sndSecure);
  const mode = r.sndSecure == null ? null : latin1(r.sndSecure ? "M" : "C");
  const parts = [maybeBytes(mode, (m) => m), maybeBytes(r.linkId, ss)];
  if (versions.hasServiceField(v)) parts.push(maybeBytes(r.serviceId, ss));
  if (versions.hasNewNotifier(v)) parts.push(maybeBytes(r.notifier, (n) => concat(ss(n.notifierId), ss(n.srvNtfDhKey))));
  return concat(...parts);
}

/** The error as `version` carries it: BLOCKED is AUTH before v12, without its notice before v18. */
function errorForVersion(error, v) {
  if (!error.startsWith("BLOCKED ")) return error;
  if (!versions.hasBlockedError(v)) return "AUTH";
  const notice = error.indexOf(",notice=");
  return !versions.hasClientNotices(v) && notice >= 0 ? error.slice(0, notice) : error;
}

/** The bytes of a router message at `version` (the router's side; here for tests and tools). */
export function encodeResponse(r, version = versions.LEGACY_VERSION) {
  switch (r.type) {
    case "IDS":
      return concat(tagBytes("IDS "), ss(r.rcvId), ss(r.sndId), ss(r.srvDhKey), encodeIdsTail(r, version));
    case "LNK":
      return concat(tagBytes("LNK "), ss(r.senderId), large(r.fixedData), large(r.userData));
    case "SOK":
      return versions.hasServiceField(version) ? concat(tagBytes("SOK "), maybeBytes(r.serviceId, ss)) : tagBytes("OK");
    case "DELD":
      return tagBytes(versions.hasDeletedEvent(version) ? "DELD" : "END");
    case "MSG":
      return concat(tagBytes("MSG "), ss(r.msgId), r.encBody);
    case "NID":
      return concat(tagBytes("NID "), ss(r.notifierId), ss(r.srvNtfDhKey));
    case "NMSG":
      if (r.nonce.length !== 24) throw new RangeError("NMSG nonce must be 24 bytes");
      return concat(tagBytes("NMSG "), r.nonce, ss(r.encMeta));
    case "INFO":
      return concat(tagBytes("INFO "), utf8(r.json));
    case "ERR":
      return concat(tagBytes("ERR "), encodeError(errorForVersion(r.error, version)));
    case "SOKS":
    case "ENDS":
      return concat(tagBytes(r.type + " "), int64(r.count));
    case "END": case "OK": case "PONG": case "ALLS":
      return tagBytes(r.type);
    default:
      throw new RangeError(`unknown response ${r.type}`);
  }
}
