// The codec: the worked examples of docs/protocol.md byte for byte, and the
// rules of blocks, batches, transmissions, commands, responses and errors.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  BATCH_LIMIT, BLOCK_SIZE, BatchPacker, MAX_TRANSMISSION_SIZE, ProtocolError,
  concat, decodeBatch, decodeClientHello, decodeCommand, decodeError, decodeResponse,
  decodeServerHello, decodeTransmission, encodeBatches, encodeClientHello, encodeCommand,
  encodeError, encodeResponse, encodeServerHello, encodeTransmission, fromHex, identityCertificate, keyType,
  latin1, negotiateVersion, padBlock, toHex, unpadBlock, utf8,
} from "../smp/index.js";

const hex = (s) => fromHex(s);
const range = (n, start = 0) => Uint8Array.from({ length: n }, (_, i) => (start + i) & 255);

function throwsType(fn, type) {
  assert.throws(fn, (e) => e instanceof ProtocolError && e.type === type);
}

describe("worked examples of docs/protocol.md", () => {
  test("Handshake: the router's hello over WebSockets is 00 09 00 0a 20 <32-byte sessionId>", () => {
    const sessionId = range(32, 0xa0);
    const content = encodeServerHello({ minVersion: 9, maxVersion: 10, sessionId });
    assert.equal(toHex(content), `0009000a20${toHex(sessionId)}`);
    const block = padBlock(content);
    assert.equal(block.length, 16384);
    assert.equal(toHex(block.subarray(0, 2)), "0025"); // 37 bytes of content
    assert.ok(block.subarray(39).every((b) => b === 0x23), "padding is '#'");
    const hello = decodeServerHello(unpadBlock(block));
    assert.deepEqual([hello.minVersion, hello.maxVersion], [9, 10]);
    assert.deepEqual(hello.sessionId, sessionId);
    assert.deepEqual(hello.certChain, []);
  });

  test("Service subscriptions: SOKS 3 and ALLS", () => {
    assert.equal(toHex(encodeResponse({ type: "SOKS", count: 3 })), "534f4b5320" + "0000000000000003");
    assert.deepEqual(decodeResponse(hex("53 4f 4b 53 20 00 00 00 00 00 00 00 03")), { type: "SOKS", count: 3 });
    assert.equal(toHex(encodeResponse({ type: "ALLS" })), "414c4c53");
    assert.deepEqual(decodeResponse(hex("41 4c 4c 53")), { type: "ALLS" });
    assert.equal(toHex(encodeCommand({ type: "SUBS" })), "53554253");
    assert.equal(toHex(encodeCommand({ type: "NSUBS" })), "4e53554253");
  });

  test("Commands and responses: the SPKI prefixes of Ed25519, X25519 and Ed448", () => {
    assert.equal(keyType(concat(hex("302a300506032b6570032100"), range(32))), "ed25519");
    assert.equal(keyType(concat(hex("302a300506032b656e032100"), range(32))), "x25519");
    assert.equal(keyType(concat(hex("3043300506032b6571033a00"), range(57))), "ed448");
    assert.equal(keyType(concat(hex("302a300506032b6570032100"), range(31))), null);
  });

  test("Blocks and batches: a block takes transmissions while 2 + tLen sums to at most 16365", () => {
    assert.equal(BATCH_LIMIT, 16365);
    assert.equal(MAX_TRANSMISSION_SIZE, 16363);
    const packer = new BatchPacker();
    assert.ok(packer.add(new Uint8Array(16363)));
    assert.ok(!packer.add(new Uint8Array(0)));
    throwsType(() => new BatchPacker().add(new Uint8Array(16364)), "LARGE_MSG");
    const blocks = encodeBatches(Array.from({ length: 300 }, () => Uint8Array.of(1)));
    assert.deepEqual(blocks.map((b) => decodeBatch(b).length), [255, 45]);
  });

  test("Transmissions: the router's answer has an empty authorization and echoes corrId", () => {
    const t = encodeTransmission({
      authorization: new Uint8Array(0), corrId: latin1("abc"), entityId: latin1("Q"), command: latin1("OK"),
    });
    assert.equal(toHex(t), "00" + "03616263" + "0151" + "4f4b");
  });
});

describe("blocks", () => {
  test("a block is exactly 16384 bytes, its content length within it", () => {
    throwsType(() => unpadBlock(new Uint8Array(BLOCK_SIZE - 1)), "BLOCK");
    const bad = new Uint8Array(BLOCK_SIZE);
    bad[0] = 0x40; // 16384 > 16382
    throwsType(() => unpadBlock(bad), "BLOCK");
    throwsType(() => padBlock(new Uint8Array(16383)), "LARGE_MSG");
  });

  test("a batch is consumed exactly", () => {
    throwsType(() => decodeBatch(padBlock(Uint8Array.of(0))), "BLOCK");
    throwsType(() => decodeBatch(padBlock(Uint8Array.of())), "BLOCK");
    throwsType(() => decodeBatch(padBlock(Uint8Array.of(1, 0, 5, 1, 2))), "BLOCK");
    throwsType(() => decodeBatch(padBlock(Uint8Array.of(1, 0, 1, 7, 9))), "BLOCK");
    assert.deepEqual(decodeBatch(padBlock(Uint8Array.of(2, 0, 1, 7, 0, 0))), [Uint8Array.of(7), Uint8Array.of()]);
  });

  test("a transmission whose short strings run past it is BLOCK", () => {
    throwsType(() => decodeTransmission(Uint8Array.of(0, 5, 1)), "BLOCK");
    throwsType(() => decodeTransmission(Uint8Array.of(0, 0)), "BLOCK");
  });
});

describe("commands", () => {
  const ed = concat(hex("302a300506032b6570032100"), range(32));
  const x = concat(hex("302a300506032b656e032100"), range(32, 100));

  test("every command survives encode then decode", () => {
    const commands = [
      { type: "NEW", rcvAuthKey: ed, rcvDhKey: x, basicAuth: null, subscribe: true, sndSecure: true },
      { type: "NEW", rcvAuthKey: ed, rcvDhKey: x, basicAuth: latin1("pw!"), subscribe: false, sndSecure: false },
      { type: "KEY", senderKey: ed },
      { type: "SKEY", senderKey: ed },
      { type: "SEND", flags: latin1("T"), body: utf8("hello world") },
      { type: "SEND", flags: latin1("Fxyz"), body: new Uint8Array(0) },
      { type: "ACK", msgId: range(24) },
      { type: "NKEY", notifierKey: ed, rcvNtfDhKey: x },
      ...["PING", "SUB", "GET", "OFF", "DEL", "QUE", "NDEL", "NSUB", "SUBS", "NSUBS"].map((type) => ({ type })),
    ];
    for (const cmd of commands) {
      const decoded = decodeCommand(encodeCommand(cmd));
      assert.deepEqual({ ...decoded }, { ...cmd }, cmd.type);
    }
  });

  test("a DH key that is not X25519, trailing bytes, or a bad flag is CMD SYNTAX", () => {
    const newWith = (dh) => concat(latin1("NEW "), Uint8Array.of(44), ed, Uint8Array.of(dh.length), dh, latin1("0ST"));
    throwsType(() => decodeCommand(newWith(ed)), "CMD SYNTAX");
    assert.equal(decodeCommand(newWith(x)).type, "NEW");
    throwsType(() => decodeCommand(concat(newWith(x), latin1("!"))), "CMD SYNTAX");
    throwsType(() => decodeCommand(latin1("SEND X hi")), "CMD SYNTAX");
    throwsType(() => decodeCommand(latin1("SUB ")), "CMD SYNTAX");
    throwsType(() => decodeCommand(latin1("HELLO")), "CMD UNKNOWN");
    throwsType(() => decodeCommand(latin1("SENDS T x")), "CMD UNKNOWN");
  });

  test("SEND flags the wire cannot carry are refused when encoding", () => {
    assert.throws(() => encodeCommand({ type: "SEND", flags: "X", body: new Uint8Array(0) }), RangeError);
    assert.throws(() => encodeCommand({ type: "SEND", flags: "T1234567", body: new Uint8Array(0) }), RangeError);
  });
});

describe("responses and errors", () => {
  const x = concat(hex("302a300506032b656e032100"), range(32, 7));

  test("every response survives encode then decode", () => {
    const responses = [
      { type: "IDS", rcvId: range(24), sndId: range(24, 50), srvDhKey: x, sndSecure: true },
      { type: "MSG", msgId: range(24), encBody: range(16122) },
      { type: "NID", notifierId: range(24), srvNtfDhKey: x },
      { type: "NMSG", nonce: range(24), encMeta: range(144) },
      { type: "INFO", json: '{"a":"é"}' },
      { type: "ERR", error: "AUTH" },
      { type: "ERR", error: "CMD NO_ENTITY" },
      { type: "ERR", error: "STORE disque plein" },
      { type: "SOKS", count: -1 },
      { type: "ENDS", count: 2 ** 40 },
      ...["END", "DELD", "OK", "PONG", "ALLS"].map((type) => ({ type })),
    ];
    for (const r of responses) assert.deepEqual({ ...decodeResponse(encodeResponse(r)) }, r, r.type);
  });

  test("errors as the grammar of docs/protocol.md has them", () => {
    const good = [
      "BLOCK", "SESSION", "CMD SYNTAX", "CMD PROHIBITED", "AUTH", "QUOTA", "NO_MSG", "LARGE_MSG",
      "INTERNAL", "CRYPTO", "SERVICE", "EXPIRED", "STORE x y", "BLOCKED reason=spam",
      "BLOCKED reason=content,notice={}", "PROXY BASIC_AUTH", "PROXY NO_SESSION",
      "PROXY PROTOCOL AUTH", "PROXY PROTOCOL PROXY PROTOCOL CMD SYNTAX", "PROXY BROKER TIMEOUT",
      "PROXY BROKER NETWORK", "PROXY BROKER TRANSPORT HANDSHAKE IDENTITY",
      "PROXY BROKER RESPONSE \u0002ab", "PROXY BROKER NETWORK CONNECT \u0001x",
    ];
    for (const e of good) {
      assert.equal(decodeError(encodeError(e)), e);
    }
    assert.equal(decodeError(latin1("CMD NO_QUEUE")), "CMD NO_ENTITY");
    for (const bad of ["AUTH x", "CMD", "CMD NOPE", "WHAT", "BLOCKED reason=other", "PROXY BROKER RESPONSE \u0005ab", "PROXY BOGUS"]) {
      throwsType(() => decodeError(latin1(bad)), "CMD SYNTAX");
    }
  });

  test("ERR without an error type is CMD SYNTAX", () => {
    throwsType(() => decodeResponse(latin1("ERR")), "CMD SYNTAX");
  });
});

describe("hellos", () => {
  test("the client hello: version, key hash, client key; the router reads it back", () => {
    const keyHash = range(32, 9);
    const clientKey = concat(hex("302a300506032b656e032100"), range(32));
    const content = encodeClientHello({ version: 10, keyHash, clientKey });
    assert.equal(toHex(content.subarray(0, 3)), "000a20");
    assert.deepEqual(decodeClientHello(content), { version: 10, keyHash, clientKey });
  });

  test("a server hello with a certificate chain and a signed key", () => {
    const hello = { minVersion: 9, maxVersion: 10, sessionId: range(32), certChain: [range(300), range(5)], signedKey: range(90) };
    assert.deepEqual(decodeServerHello(encodeServerHello(hello)), hello);
    // A cert part that does not parse is treated as absent.
    const broken = concat(encodeServerHello({ minVersion: 9, maxVersion: 10, sessionId: range(32) }), Uint8Array.of(2, 0, 9));
    assert.deepEqual(decodeServerHello(broken).certChain, []);
    throwsType(() => decodeServerHello(Uint8Array.of(0, 9, 0)), "HANDSHAKE");
    // Before version 7 there is no cert part: the same bytes are ignored.
    const old = encodeServerHello({ ...hello, minVersion: 4, maxVersion: 6 });
    assert.deepEqual(decodeServerHello(old).certChain, []);
  });

  test("the identity certificate is the only one of a chain of one, the second of a longer one", () => {
    assert.equal(identityCertificate([]), null);
    assert.deepEqual(identityCertificate([range(3)]), range(3));
    assert.deepEqual(identityCertificate([range(3), range(4), range(5)]), range(4));
  });

  test("the version is the highest both ranges contain", () => {
    assert.equal(negotiateVersion(9, 10, 9, 10), 10);
    assert.equal(negotiateVersion(9, 10, 1, 9), 9);
    assert.equal(negotiateVersion(9, 10, 11, 12), null);
  });
});
