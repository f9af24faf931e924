// The JavaScript half of the cross-language codec checks (tests/web/).
//
//   node crosscheck.mjs decode FILE   reads encodings made by router.protocol,
//                                     prints what this codec decodes them to and
//                                     whether re-encoding gives the same bytes
//                                     (kind "identity": whether a server hello's
//                                     identity certificate hashes to keyHash);
//   node crosscheck.mjs encode FILE   encodes what FILE asks for with this codec,
//                                     for router.protocol to decode and verify.
// Bytes travel as hex in JSON.

import { readFileSync } from "node:fs";

import {
  concat, crypto, decodeBatch, decodeClientHello, decodeCommand, decodeError, decodeResponse,
  decodeServerHello, decodeTransmission, encodeBatches, encodeClientHello, encodeCommand,
  encodeError, encodeResponse, encodeServerHello, encodeTransmission, equal, fromHex, padBlock,
  toHex, unpadBlock, utf8,
} from "../smp/index.js";

/** A decoded value as JSON: bytes as hex, the rest as it is. */
function view(value) {
  if (value instanceof Uint8Array) return toHex(value);
  if (Array.isArray(value)) return value.map(view);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, view(v)]));
  }
  return value;
}

const DECODERS = {
  command: (b) => {
    const v = decodeCommand(b);
    return [v, encodeCommand(v)];
  },
  response: (b) => {
    const v = decodeResponse(b);
    return [v, encodeResponse(v)];
  },
  error: (b) => {
    const v = decodeError(b);
    return [v, encodeError(v)];
  },
  transmission: (b) => {
    const v = decodeTransmission(b);
    return [v, encodeTransmission(v)];
  },
  serverHello: (b) => {
    const v = decodeServerHello(unpadBlock(b));
    return [v, padBlock(encodeServerHello(v))];
  },
  clientHello: (b) => {
    const v = decodeClientHello(unpadBlock(b));
    return [v, padBlock(encodeClientHello(v))];
  },
  batch: (b) => {
    const v = decodeBatch(b);
    const again = encodeBatches(v);
    return [v, again.length === 1 ? again[0] : concat(...again)];
  },
  msgBody: (b, f) => [crypto.decryptMsgBody(fromHex(f.key), fromHex(f.msgId), b), null],
  ntfMeta: (b, f) => [crypto.decryptNtfMeta(fromHex(f.key), fromHex(f.nonce), b), null],
};

/** A server hello block and a key hash: what connect() decides about the router's identity. */
async function checkIdentity(f) {
  const hello = decodeServerHello(unpadBlock(fromHex(f.hex)));
  return { value: { matches: await crypto.identityMatches(hello, fromHex(f.keyHash)) }, same: null };
}

async function decodeAll(fixtures) {
  return Promise.all(fixtures.map(async (f) => {
    const bytes = fromHex(f.hex);
    try {
      if (f.kind === "identity") return await checkIdentity(f);
      const [value, again] = DECODERS[f.kind](bytes, f);
      return { value: view(value), same: again === null ? null : equal(again, bytes) };
    } catch (e) {
      return { error: e.type ?? String(e) };
    }
  }));
}

async function encodeAll(request) {
  const sessionId = fromHex(request.sessionId);
  const signer = crypto.newEd25519();
  const dh = crypto.newX25519();
  const commands = [
    { type: "NEW", rcvAuthKey: signer.publicKey, rcvDhKey: dh.publicKey, basicAuth: null, subscribe: true, sndSecure: true },
    { type: "NEW", rcvAuthKey: signer.publicKey, rcvDhKey: dh.publicKey, basicAuth: utf8("secret"), subscribe: false, sndSecure: false },
    { type: "KEY", senderKey: signer.publicKey },
    { type: "SKEY", senderKey: signer.publicKey },
    { type: "SEND", flags: utf8("T"), body: utf8("hello from JavaScript, ünïcödé") },
    { type: "SEND", flags: utf8("F"), body: new Uint8Array(16064).fill(7) },
    { type: "ACK", msgId: crypto.randomBytes(24) },
    { type: "NKEY", notifierKey: signer.publicKey, rcvNtfDhKey: dh.publicKey },
    ...["PING", "SUB", "GET", "OFF", "DEL", "NSUB"].map((type) => ({ type })),
  ];
  const transmissions = await Promise.all(commands.map(async (cmd, i) => {
    const command = encodeCommand(cmd);
    const corrId = crypto.randomBytes(24);
    const entityId = cmd.type === "NEW" || cmd.type === "PING" ? new Uint8Array(0) : crypto.randomBytes(24);
    const authorization = cmd.type === "PING" ? new Uint8Array(0) : await crypto.authorize(signer.seed, sessionId, corrId, entityId, command);
    return { cmd: view(cmd), index: i, bytes: encodeTransmission({ authorization, corrId, entityId, command }) };
  }));
  const boxKey = fromHex(request.boxKey);
  const msgId = crypto.randomBytes(24);
  return {
    signerKey: toHex(signer.publicKey),
    commands: transmissions.map((t) => ({ cmd: t.cmd, hex: toHex(t.bytes) })),
    blocks: encodeBatches(transmissions.map((t) => t.bytes)).map(toHex),
    clientHello: toHex(padBlock(encodeClientHello({ version: 10, keyHash: fromHex(request.keyHash), clientKey: dh.publicKey }))),
    msgBody: {
      msgId: toHex(msgId),
      hex: toHex(crypto.encryptMsgBody(boxKey, msgId, 1767225600, utf8("T"), utf8("boxed in JavaScript"))),
    },
    errors: request.errors.map((e) => toHex(encodeError(e))),
  };
}

const [mode, file] = process.argv.slice(2);
const input = JSON.parse(readFileSync(file, "utf8"));
if (mode === "decode") process.stdout.write(JSON.stringify(await decodeAll(input)));
else if (mode === "encode") process.stdout.write(JSON.stringify(await encodeAll(input)));
else {
  process.stderr.write("usage: crosscheck.mjs decode|encode FILE\n");
  process.exit(2);
}
