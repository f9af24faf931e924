// Router addresses (docs/protocol.md, "WebSocket mapping"):
// smp://<base64url(keyHash), '=' padded>@host:port, optionally followed by a path.

import { fromBase64url, toBase64url } from "./bytes.js";

/**
 * {keyHash, host, port, path} from an smp:// address. A browser reaches the
 * router by a ws:// or wss:// URL; `wsUrl(address, secure)` builds it.
 */
export function parseRouterAddress(text) {
  const m = /^smp:\/\/([A-Za-z0-9_=-]+)@(\[[^\]]+\]|[^:/,]+)(?:,[^:/]*)?(?::(\d+))?(\/.*)?$/.exec(text);
  if (!m) throw new SyntaxError(`not an smp:// address: ${text}`);
  const keyHash = fromBase64url(m[1]);
  if (keyHash.length !== 32) throw new SyntaxError("key hash must be 32 bytes");
  return { keyHash, host: m[2], port: m[3] ? Number(m[3]) : 5223, path: m[4] ?? "/" };
}

export function formatRouterAddress(keyHash, host, port) {
  const shown = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  return `smp://${toBase64url(keyHash, true)}@${shown}:${port}`;
}

export function wsUrl({ host, port, path }, secure = false) {
  return `${secure ? "wss" : "ws"}://${host}:${port}${path}`;
}
