// Transmissions (docs/protocol.md, "Transmissions and authorization"):
// ss(authorization) | ss(corrId) | ss(entityId) | command.

import { concat } from "./bytes.js";
import { ss } from "./encoding.js";
import { BLOCK, ProtocolError } from "./errors.js";

export function encodeTransmission({ authorization, corrId, entityId, command }) {
  return concat(ss(authorization), ss(corrId), ss(entityId), command);
}

/** Split one transmission; ProtocolError(BLOCK) if the short strings do not fit. */
export function decodeTransmission(data) {
  const fields = [];
  let pos = 0;
  for (let i = 0; i < 3; i++) {
    if (pos >= data.length) throw new ProtocolError(BLOCK, "truncated transmission");
    const end = pos + 1 + data[pos];
    if (end > data.length) throw new ProtocolError(BLOCK, "truncated transmission");
    fields.push(data.subarray(pos + 1, end));
    pos = end;
  }
  const [authorization, corrId, entityId] = fields;
  return { authorization, corrId, entityId, command: data.subarray(pos) };
}

/** The bytes an authorization covers: the session id is signed, never sent. */
export function authorizedBytes(sessionId, corrId, entityId, command) {
  return concat(ss(sessionId), ss(corrId), ss(entityId), command);
}
