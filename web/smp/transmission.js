// Transmissions (docs/protocol.md#transmissions):
// ss(authorization) | [serviceSig] | ss(corrId) | ss(entityId) | command,
// where serviceSig ("0" or "1" ss(signature)) follows a non-empty authorization
// from v16 (docs/protocol.md#service-signature).

import { concat } from "./bytes.js";
import { ss } from "./encoding.js";
import { BLOCK, ProtocolError } from "./errors.js";
import { LEGACY_VERSION, hasServiceField } from "./versions.js";

export function encodeTransmission({ authorization, corrId, entityId, command }, version = LEGACY_VERSION) {
  const service = authorization.length && hasServiceField(version) ? Uint8Array.of(0x30) : new Uint8Array(0);
  return concat(ss(authorization), service, ss(corrId), ss(entityId), command);
}

const truncated = () => new ProtocolError(BLOCK, "truncated transmission");

/** Split one transmission; ProtocolError(BLOCK) if the fields do not fit. */
export function decodeTransmission(data, version = LEGACY_VERSION) {
  if (!data.length) throw truncated();
  let pos = 1 + data[0];
  if (pos > data.length) throw truncated();
  const authorization = data.subarray(1, pos);
  let serviceSig = null;
  if (authorization.length && hasServiceField(version)) {
    if (data[pos] === 0x31 && data[pos + 1] === 64 && pos + 66 <= data.length) {
      serviceSig = data.subarray(pos + 2, pos + 66);
      pos += 66;
    } else if (data[pos] === 0x30) pos += 1;
    else throw new ProtocolError(BLOCK, "bad service signature field");
  }
  const fields = [];
  for (let i = 0; i < 2; i++) {
    if (pos >= data.length) throw truncated();
    const end = pos + 1 + data[pos];
    if (end > data.length) throw truncated();
    fields.push(data.subarray(pos + 1, end));
    pos = end;
  }
  const [corrId, entityId] = fields;
  return { authorization, serviceSig, corrId, entityId, command: data.subarray(pos) };
}

/** The bytes an authorization covers: the session id is signed, never sent. */
export function authorizedBytes(sessionId, corrId, entityId, command) {
  return concat(ss(sessionId), ss(corrId), ss(entityId), command);
}
