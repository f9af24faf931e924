// SMPClient: one WebSocket connection to a router, the SMP commands as methods.
//
//   const client = await connect("ws://127.0.0.1:8080/smp", keyHash);
//   const queue = await client.createQueue();
//   await client.send(queue.senderId, utf8("hello"));
//   await client.subscribe(queue);
//   const event = await client.nextEvent();   // {type: "message", body, msgId, ...}
//   await client.ack(queue, event.msgId);
//
// Transmissions asked for in the same turn of the event loop go out packed into
// as few blocks as fit (docs/protocol.md, "Blocks and batches"). Each command
// carries a fresh corrId; the reader matches answers to callers by it. Pushes
// (empty corrId: MSG, END, DELD, NMSG) become events, MSG bodies decrypted with
// the queue's box key. When the connection ends, every waiting caller gets the
// ConnectionClosed that ended it.

import { concat, fromUtf8, toHex } from "./bytes.js";
import { BLOCK_SIZE, BatchPacker, MAX_TRANSMISSION_SIZE, decodeBatch, padBlock, unpadBlock } from "./block.js";
import { decodeResponse, encodeCommand } from "./codec.js";
import * as crypto from "./crypto.js";
import {
  BadResponse, CommandTimeout, ConnectionClosed, HandshakeError, IdentityMismatch, LARGE_MSG, ProtocolError,
  SMPError,
} from "./errors.js";
import {
  SMP_VERSION_MAX, SMP_VERSION_MIN, decodeServerHello, encodeClientHello, negotiateVersion,
} from "./handshake.js";
import { forgetSigningKey } from "./signing.js";
import { decodeTransmission, encodeTransmission } from "./transmission.js";
import { BlockCipher } from "./blockcrypto.js";
import { hasBlockEncryption } from "./versions.js";

const EMPTY = new Uint8Array(0);

/**
 * @typedef {object} ConnectOptions
 * @property {{new (url: string): WebSocket} | any} [WebSocket] the WebSocket constructor (default: the global one)
 * @property {[number, number]} [versions] the SMP versions to offer, [min, max]
 * @property {number} [timeout] ms for opening the connection and the handshake (default 15000)
 * @property {boolean} [confirm] confirm with one PING when the identity cannot be checked (default true)
 * @property {number} [commandTimeout] ms a command waits for its answer (default 30000; 0: no limit)
 * @property {number} [pingInterval] ms of silence before a keepalive PING (default 30000; 0: none)
 * @property {number} [pingTimeout] ms a keepalive PING has to be answered (default 15000)
 */

/** @typedef {import("./types.js").ClientEvent} ClientEvent */

/**
 * Open a WebSocket to `url` (ws:// or wss://, any path), run the SMP handshake
 * and resolve to a ready SMPClient. `keyHash` is the router's 32-byte identity
 * (Uint8Array). Options: `WebSocket` (the constructor to use, by default the
 * global one), `versions` ([min, max], default [9, 19]), `timeout` (ms for the
 * connection and the handshake, default 15000), `confirm` (default true: make
 * sure here that the router accepts the hello, see below), `commandTimeout` (ms a command
 * waits for its answer before it rejects with CommandTimeout, default 30000;
 * 0: wait as long as the connection lasts), `pingInterval` (ms of silence from
 * the router after which the client sends PING, default 30000; 0: never) and
 * `pingTimeout` (ms that PING has to be answered before the connection is taken
 * for dead and closed, default 15000).
 *
 * In Node 20 the global WebSocket exists only with `node --experimental-websocket`;
 * without it, pass another implementation: `{WebSocket: (await import("ws")).WebSocket}`.
 *
 * The router's hello carries its identity certificate (docs/protocol.md,
 * "Identity in the server hello"). If its SHA-256 is not `keyHash`, connect
 * closes the connection without sending a hello and rejects with
 * IdentityMismatch. Where the certificate cannot be checked (a router that
 * does not send it, or a page without WebCrypto: browsers give
 * `crypto.subtle` only to https pages and to http on localhost), one PING
 * round trip confirms the hello instead (see confirmHello).
 *
 * @param {string} url
 * @param {Uint8Array} keyHash
 * @param {ConnectOptions} [options]
 * @returns {Promise<SMPClient>}
 */
export async function connect(url, keyHash, options = {}) {
  const WebSocketImpl = options.WebSocket ?? globalThis.WebSocket;
  if (!WebSocketImpl) {
    throw new TypeError(
      "no WebSocket here: pass options.WebSocket (in Node 20, run node --experimental-websocket or use the ws package)",
    );
  }
  if (!(keyHash instanceof Uint8Array) || keyHash.length !== 32) {
    throw new TypeError("keyHash must be 32 bytes");
  }
  const versions = options.versions ?? [SMP_VERSION_MIN, SMP_VERSION_MAX];
  const socket = new BlockSocket(new WebSocketImpl(url), url);
  const timer = setTimeout(
    () => socket.close(new HandshakeError(`no SMP handshake with ${url} in time`)),
    options.timeout ?? 15000,
  );
  try {
    const hello = parseServerHello(await socket.receive());
    const version = negotiateVersion(hello.minVersion, hello.maxVersion, versions[0], versions[1]);
    if (version === null) {
      throw new HandshakeError(
        `no common version: router offers ${hello.minVersion}..${hello.maxVersion}, ` +
          `client supports ${versions[0]}..${versions[1]}`,
      );
    }
    const identityChecked = await checkIdentity(hello, keyHash);
    const { privateKey: clientPriv, publicKey: clientKey } = crypto.newX25519();
    // From v11 every later block is encrypted (docs/protocol.md#block-encryption).
    let cipher = null;
    if (hasBlockEncryption(version) && hello.signedKey) {
      const secret = crypto.dhSecret(clientPriv, crypto.helloDhKey(hello.signedKey));
      cipher = BlockCipher.forClient(hello.sessionId, secret);
    }
    socket.send(padBlock(encodeClientHello({ version, keyHash, clientKey })));
    const client = new SMPClient(socket, version, hello.sessionId, url, options, cipher);
    if (!identityChecked && (options.confirm ?? true)) await confirmHello(client);
    return client;
  } catch (e) {
    socket.close(e instanceof ConnectionClosed ? e : new HandshakeError(String(e)));
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Whether the router's identity certificate was checked against `keyHash`:
 * false when the hello has none or there is no WebCrypto to hash it; an
 * IdentityMismatch when it does not match.
 */
async function checkIdentity(hello, keyHash) {
  const matches = await crypto.identityMatches(hello, keyHash);
  if (matches === false) {
    throw new IdentityMismatch(
      "router identity does not match the key hash: wrong address, or another router answers at it",
    );
  }
  return matches === true;
}

/**
 * The router answers nothing to a client hello it accepts and closes the
 * connection on one it refuses (a key hash that is not its own). One PING
 * round trip tells the two apart before `connect` resolves, so a wrong key
 * hash is a HandshakeError here rather than a failure of the first command.
 */
async function confirmHello(client) {
  try {
    await client.ping();
  } catch (e) {
    if (!(e instanceof ConnectionClosed)) throw e;
    throw new HandshakeError(
      `the router closed the connection after the hello (${e.message}): is the key hash right?`,
    );
  }
}

function parseServerHello(block) {
  try {
    return decodeServerHello(unpadBlock(block));
  } catch (e) {
    if (e instanceof ProtocolError) throw new HandshakeError(`unusable server hello: ${e.message}`);
    throw e;
  }
}

/** A WebSocket carrying one SMP block per binary message. */
class BlockSocket {
  constructor(ws, url) {
    this.ws = ws;
    this.url = url;
    this.closed = null; // the ConnectionClosed that ended it
    this.onBlock = null; // after the handshake, every block goes here
    this.onClose = null;
    this.waiting = []; // blocks received before anyone asked for them
    this.receivers = [];
    ws.binaryType = "arraybuffer";
    ws.onmessage = (ev) => this.received(ev.data);
    ws.onclose = (ev) => {
      const detail = ev.reason ? `: ${ev.reason}` : "";
      this.close(new ConnectionClosed(`connection closed (${ev.code}${detail})`));
    };
    ws.onerror = () => this.close(new ConnectionClosed(`cannot connect to ${url} or connection broken`));
  }

  received(data) {
    if (this.closed) return;
    if (!(data instanceof ArrayBuffer) || data.byteLength !== BLOCK_SIZE) {
      const size = data.byteLength ?? data.length;
      this.close(new ConnectionClosed(`router sent a message of ${size} bytes, not a block`));
      return;
    }
    const block = new Uint8Array(data);
    if (this.onBlock) this.onBlock(block);
    else if (this.receivers.length) this.receivers.shift().resolve(block);
    else this.waiting.push(block);
  }

  receive() {
    if (this.waiting.length) return Promise.resolve(this.waiting.shift());
    if (this.closed) return Promise.reject(this.closed);
    return new Promise((resolve, reject) => this.receivers.push({ resolve, reject }));
  }

  send(block) {
    if (this.closed) throw this.closed;
    if (this.ws.readyState !== 1) throw new ConnectionClosed("connection is not open");
    this.ws.send(block);
  }

  close(error) {
    if (this.closed) return;
    this.closed = error;
    for (const r of this.receivers.splice(0)) r.reject(error);
    try {
      this.ws.close(1000);
    } catch {
      // already closing
    }
    if (this.onClose) this.onClose(error);
  }
}

/** Expect one of `types` (or an ERR, thrown as SMPError). */
function expect(response, ...types) {
  if (response.type === "ERR") throw new SMPError(response.error);
  if (!types.includes(response.type)) {
    throw new BadResponse(`unexpected response ${response.type}, expected ${types.join(" or ")}`);
  }
  return response;
}

export const DEFAULT_COMMAND_TIMEOUT = 30000;
export const DEFAULT_PING_INTERVAL = 30000;
export const DEFAULT_PING_TIMEOUT = 15000;

export class SMPClient {
  /**
   * Made by `connect`.
   * @param {any} socket
   * @param {number} version
   * @param {Uint8Array} sessionId
   * @param {string} url
   * @param {ConnectOptions} [options]
   * @param {BlockCipher | null} [cipher] block encryption from v11, null before
   */
  constructor(socket, version, sessionId, url, options = {}, cipher = null) {
    /** @private */
    this.socket = socket;
    this.version = version;
    this.cipher = cipher; // block encryption from v11, null before
    this.sessionId = sessionId;
    this.url = url;
    /** @private */
    this.queues = new Map(); // hex(recipientId) -> queue, to open MSG bodies
    /** @private */
    this.notifiers = new Map(); // hex(notifierId) -> credentials, to open NMSG metadata
    /** @private */
    this.pending = new Map(); // hex(corrId) -> {resolve, reject, routeMsg, abandoned}
    /** @private */
    this.outbox = [];
    /** @private */
    this.flushScheduled = false;
    /** @private */
    this.sending = Promise.resolve(); // the blocks of one flush go out before the next one's
    /** @private */
    this.commandTimeout = options.commandTimeout ?? DEFAULT_COMMAND_TIMEOUT;
    /** @private */
    this.pingInterval = options.pingInterval ?? DEFAULT_PING_INTERVAL;
    /** @private */
    this.pingTimeout = options.pingTimeout ?? DEFAULT_PING_TIMEOUT;
    /** @private */
    this.lastReceived = Date.now();
    /** @private */
    this.keepaliveTimer = null;
    /** @private */
    this.corrPrefix = crypto.randomBytes(16);
    /** @private */
    this.corrNext = 0;
    /** @private */
    this.events = [];
    /** @private */
    this.eventWaiters = [];
    /** @private */
    this.listeners = new Set();
    this.stats = { blocksSent: 0, blocksReceived: 0 };
    /** @private */
    this.closedPromise = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
    socket.onBlock = (block) => this.readBlock(block);
    socket.onClose = (error) => this.ended(error);
    for (const block of socket.waiting.splice(0)) this.readBlock(block);
    if (socket.closed) this.ended(socket.closed);
    else this.scheduleKeepalive(this.pingInterval);
  }

  /**
   * Why the connection ended, or null while it is open.
   * @returns {ConnectionClosed | null}
   */
  get closed() {
    return this.socket.closed;
  }

  /**
   * Resolves with the ConnectionClosed once the connection is over.
   * @returns {Promise<ConnectionClosed>}
   */
  whenClosed() {
    return this.closedPromise;
  }

  close() {
    this.socket.close(new ConnectionClosed("connection closed by the client", { local: true }));
  }

  // --- events -------------------------------------------------------------

  /**
   * Call `listener(event)` for every pushed event; returns a function that stops it.
   * While a listener is set, events do not wait for `nextEvent`.
   * @param {(event: ClientEvent) => void} listener
   * @returns {() => void}
   */
  onEvent(listener) {
    this.listeners.add(listener);
    for (const ev of this.events.splice(0)) listener(ev);
    return () => this.listeners.delete(listener);
  }

  /**
   * The next pushed event; rejects with ConnectionClosed once the connection is over.
   * @returns {Promise<ClientEvent>}
   */
  nextEvent() {
    if (this.events.length) return Promise.resolve(this.events.shift());
    if (this.closed) return Promise.reject(this.closed);
    return new Promise((resolve, reject) => this.eventWaiters.push({ resolve, reject }));
  }

  /**
   * The next event if one is waiting, else null.
   * @returns {ClientEvent | null}
   */
  nextEventNow() {
    return this.events.length ? this.events.shift() : null;
  }

  /** @private */
  emit(event) {
    if (this.listeners.size) {
      for (const listener of this.listeners) listener(event);
    } else if (this.eventWaiters.length) {
      this.eventWaiters.shift().resolve(event);
    } else {
      this.events.push(event);
    }
  }

  /** @private */
  ended(error) {
    clearTimeout(this.keepaliveTimer);
    for (const entry of this.pending.values()) entry.reject(error);
    this.pending.clear();
    for (const w of this.eventWaiters.splice(0)) w.reject(error);
    this.resolveClosed(error);
  }

  // --- requests ---------------------------------------------------------

  /**
   * Let this connection open the MSGs of `queue` (e.g. one created on another connection).
   * @param {import("./types.js").Queue} queue
   */
  addQueue(queue) {
    this.queues.set(toHex(queue.recipientId), queue);
  }

  /** @param {import("./types.js").Queue} queue */
  forgetQueue(queue) {
    this.queues.delete(toHex(queue.recipientId));
  }

  /**
   * Send one command (a value, or bytes as they are), signed when `seed` is
   * given; the response. `options`: {signal, timeout}, see `commands`.
   * @param {Uint8Array} entityId
   * @param {Uint8Array | {type: string, [field: string]: any}} cmd
   * @param {Uint8Array | null} [seed]
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<{type: string, [field: string]: any}>}
   */
  async command(entityId, cmd, seed = null, options = {}) {
    return (await this.commands([[entityId, cmd, seed]], options))[0];
  }

  /**
   * Send `[entityId, cmd, seed]` requests packed into as few blocks as fit; their responses.
   * `signal` (an AbortSignal) abandons them: each rejects with the signal's
   * reason; one not yet sent is not sent. `timeout` (ms, default the
   * connection's commandTimeout; 0: none) rejects a request whose answer has
   * not come in time with CommandTimeout.
   * @param {[Uint8Array, Uint8Array | {type: string, [field: string]: any}, (Uint8Array | null)?][]} requests
   * @param {import("./types.js").CommandOptions & {routeMsg?: boolean}} [options]
   * @returns {Promise<{type: string, [field: string]: any}[]>}
   */
  commands(requests, { routeMsg = false, signal = undefined, timeout = this.commandTimeout } = {}) {
    if (this.closed) return Promise.reject(this.closed);
    if (signal?.aborted) return Promise.reject(signal.reason);
    return Promise.all(
      requests.map(([entityId, cmd, seed]) => this.submit(entityId, cmd, seed, routeMsg, signal, timeout)),
    );
  }

  /** @private */
  submit(entityId, cmd, seed, routeMsg, signal, timeout) {
    const corrId = this.newCorrId();
    const key = toHex(corrId);
    const command = cmd instanceof Uint8Array ? cmd : encodeCommand(cmd, this.version);
    const item = { key, transmission: this.transmission(seed, corrId, entityId, command) };
    return new Promise((resolve, reject) => {
      let timer = null;
      const finish = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", aborted);
      };
      // Given up on: a late answer is dropped, but a MSG answering SUB or ACK is still an event.
      const abandon = (error) => {
        finish();
        this.pending.set(key, { resolve() {}, reject() {}, routeMsg, abandoned: true });
        reject(error);
      };
      const aborted = () => abandon(signal.reason);
      this.pending.set(key, {
        resolve: (value) => {
          finish();
          resolve(value);
        },
        reject: (error) => {
          finish();
          reject(error);
        },
        routeMsg,
        abandoned: false,
      });
      signal?.addEventListener("abort", aborted, { once: true });
      if (timeout > 0) {
        timer = setTimeout(
          () => abandon(new CommandTimeout(`no answer to ${commandName(command)} in ${timeout} ms`)),
          timeout,
        );
      }
      this.outbox.push(item);
      this.scheduleFlush();
    });
  }

  /** The transmission's bytes, or a promise of them while the signature is made. @private */
  transmission(seed, corrId, entityId, command) {
    const version = this.version;
    if (!seed) return encodeTransmission({ authorization: EMPTY, corrId, entityId, command }, version);
    return crypto
      .authorize(seed, this.sessionId, corrId, entityId, command)
      .then((authorization) => encodeTransmission({ authorization, corrId, entityId, command }, version));
  }

  /** @private */
  newCorrId() {
    const n = this.corrNext++;
    const counter = new Uint8Array(8);
    new DataView(counter.buffer).setBigUint64(0, BigInt(n));
    return concat(this.corrPrefix, counter);
  }

  /** @private */
  scheduleFlush() {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // Everything asked for in this turn of the event loop goes into the same blocks.
    queueMicrotask(() => {
      this.flushScheduled = false;
      const items = this.outbox.splice(0);
      this.sending = this.sending.then(() => this.flush(items));
    });
  }

  /** @private */
  async flush(items) {
    // Signatures are made concurrently (WebCrypto works off the main thread).
    const transmissions = await Promise.all(items.map((item) => Promise.resolve(item.transmission).catch((e) => e)));
    if (this.closed) return;
    const packer = new BatchPacker();
    try {
      items.forEach((item, i) => {
        const entry = this.pending.get(item.key);
        if (!entry || entry.abandoned) {
          this.pending.delete(item.key); // aborted or timed out before it was sent
          return;
        }
        const data = transmissions[i];
        if (!(data instanceof Uint8Array)) {
          this.pending.delete(item.key);
          entry.reject(data);
        } else if (data.length > MAX_TRANSMISSION_SIZE) {
          this.pending.delete(item.key);
          entry.resolve({ type: "ERR", error: LARGE_MSG }); // never sent, as the reference does
        } else if (!packer.add(data)) {
          this.sendBlock(packer.takeBlock());
          packer.add(data);
        }
      });
      if (packer.length) this.sendBlock(packer.takeBlock());
    } catch (e) {
      this.socket.close(e instanceof ConnectionClosed ? e : new ConnectionClosed(`cannot send: ${e}`));
    }
  }

  // --- keepalive --------------------------------------------------------------

  /** @private */
  scheduleKeepalive(delay) {
    if (!(this.pingInterval > 0) || this.closed) return;
    clearTimeout(this.keepaliveTimer);
    /** @type {any} a browser's timer id, or Node's Timeout object */
    const timer = setTimeout(() => this.keepalive(), delay);
    timer.unref?.(); // in Node, an idle client does not keep the process alive
    this.keepaliveTimer = timer;
  }

  /** PING after `pingInterval` ms of silence; no PONG in `pingTimeout` ms closes the connection. @private */
  async keepalive() {
    const silent = Date.now() - this.lastReceived;
    if (silent < this.pingInterval) {
      this.scheduleKeepalive(this.pingInterval - silent);
      return;
    }
    try {
      await this.command(EMPTY, { type: "PING" }, null, { timeout: this.pingTimeout });
    } catch (e) {
      if (e instanceof CommandTimeout) {
        this.socket.close(new ConnectionClosed(
          `no answer to PING in ${this.pingTimeout} ms after ${silent} ms of silence: connection dropped`,
        ));
      }
      return;
    }
    this.scheduleKeepalive(this.pingInterval);
  }

  /** @private */
  sendBlock(block) {
    this.stats.blocksSent++;
    this.socket.send(this.cipher ? this.cipher.seal(unpadBlock(block)) : block);
  }

  /** Send `block` as one WebSocket message (for tests of bad input). On an encrypted
   * connection a well-formed padded block is sealed, so that its content reaches the
   * router's parser; anything else goes out as it is. */
  sendRawBlock(block) {
    const length = block.length === BLOCK_SIZE ? (block[0] << 8) | block[1] : -1;
    const sealable = this.cipher && length >= 0 && length <= BLOCK_SIZE - 18;
    this.socket.send(sealable ? this.cipher.seal(block.subarray(2, 2 + length)) : block);
  }

  // --- reader -------------------------------------------------------------

  /** @private */
  readBlock(block) {
    this.stats.blocksReceived++;
    this.lastReceived = Date.now();
    let transmissions;
    try {
      const plain = this.cipher ? padBlock(this.cipher.open(block)) : block;
      transmissions = decodeBatch(plain).map((t) => decodeTransmission(t, this.version));
    } catch (e) {
      // Callers whose answers were in this block would wait forever.
      this.socket.close(new ConnectionClosed(`router sent a bad block: ${e.message}`));
      return;
    }
    for (const t of transmissions) this.route(t);
  }

  /** @private */
  route(t) {
    let response;
    try {
      response = decodeResponse(t.command, this.version);
    } catch {
      response = null;
    }
    if (t.corrId.length) {
      const key = toHex(t.corrId);
      const entry = this.pending.get(key);
      if (entry) {
        this.pending.delete(key);
        if (entry.abandoned) {
          if (entry.routeMsg && response?.type === "MSG") this.emit(this.messageEvent(t.entityId, response));
          return;
        }
        if (!response) {
          entry.reject(new BadResponse(`unparsable response ${fromUtf8Lossy(t.command)}`));
          return;
        }
        // A MSG answering SUB or ACK is a delivery: an event, not only an answer.
        if (entry.routeMsg && response.type === "MSG") this.emit(this.messageEvent(t.entityId, response));
        entry.resolve(response);
        return;
      }
    }
    const event = response && !t.corrId.length ? this.pushEvent(t.entityId, response) : null;
    this.emit(event ?? { type: "raw", corrId: t.corrId, entityId: t.entityId, command: t.command, response });
  }

  /** @private */
  pushEvent(entityId, response) {
    switch (response.type) {
      case "MSG":
        return this.messageEvent(entityId, response);
      case "END":
        return { type: "end", recipientId: entityId };
      case "DELD":
        return { type: "deleted", recipientId: entityId };
      case "NMSG":
        return this.notificationEvent(entityId, response);
      default:
        return null;
    }
  }

  /** Open a MSG with its queue's box key: a "message" event, or "undecrypted". @private */
  messageEvent(recipientId, msg) {
    const queue = this.queues.get(toHex(recipientId));
    if (queue) {
      try {
        const m = crypto.decryptMsgBody(queue.boxKey, msg.msgId, msg.encBody);
        return { type: "message", recipientId, msgId: msg.msgId, ts: m.ts, flags: m.flags, body: m.body, quota: m.quota };
      } catch (e) {
        if (!(e instanceof ProtocolError)) throw e;
      }
    }
    return { type: "undecrypted", recipientId, msgId: msg.msgId, encBody: msg.encBody };
  }

  /** A "notification" event; msgId and ts are filled in when this client holds the notifier's box key. @private */
  notificationEvent(notifierId, nmsg) {
    const event = { type: "notification", notifierId, nonce: nmsg.nonce, encMeta: nmsg.encMeta, msgId: null, ts: null };
    const creds = this.notifiers.get(toHex(notifierId));
    if (creds) {
      try {
        Object.assign(event, crypto.decryptNtfMeta(creds.ntfBoxKey, nmsg.nonce, nmsg.encMeta));
      } catch (e) {
        if (!(e instanceof ProtocolError)) throw e; // handed on sealed
      }
    }
    return event;
  }

  /** Let this connection open the NMSG metadata of a notifier (see enableNotifications). */
  addNotifier(creds) {
    this.notifiers.set(toHex(creds.notifierId), creds);
  }

  // --- recipient ----------------------------------------------------------
  //
  // Every command method takes `options` last: {signal, timeout} (see `commands`).

  /**
   * NEW: a queue with fresh keys, registered so its MSGs are decrypted.
   * The queue is a plain object of Uint8Arrays and booleans: it can be stored
   * (IndexedDB, structured clone) and given back to any later connection.
   * @param {{subscribe?: boolean, sndSecure?: boolean, basicAuth?: Uint8Array | null}} [params]
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<import("./types.js").Queue>}
   */
  async createQueue({ subscribe = false, sndSecure = true, basicAuth = null } = {}, options = {}) {
    const [auth, dh] = await Promise.all([crypto.generateEd25519(), crypto.generateX25519()]);
    const cmd = { type: "NEW", rcvAuthKey: auth.publicKey, rcvDhKey: dh.publicKey, basicAuth, subscribe, sndSecure };
    const ids = expect(await this.command(EMPTY, cmd, auth.seed, options), "IDS");
    const queue = {
      recipientId: ids.rcvId.slice(),
      senderId: ids.sndId.slice(),
      rcvAuthSeed: auth.seed,
      rcvAuthKey: auth.publicKey,
      rcvDhPriv: dh.privateKey,
      srvDhKey: ids.srvDhKey.slice(),
      boxKey: await crypto.deriveBoxKey(dh.privateKey, ids.srvDhKey),
      sndSecure: ids.sndSecure,
    };
    this.addQueue(queue);
    return queue;
  }

  /**
   * KEY: only `senderKey` (an Ed25519 SPKI) may send to the queue from now on.
   * @param {import("./types.js").Queue} queue
   * @param {Uint8Array} senderKey
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async secureQueue(queue, senderKey, options = {}) {
    await this.recipientOk(queue, { type: "KEY", senderKey }, options);
  }

  /**
   * SUB: a waiting message arrives as a "message" event.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async subscribe(queue, options = {}) {
    const [error] = await this.subscribeMany([queue], options);
    if (error) throw error;
  }

  /**
   * SUB for every queue, packed into few blocks; null or the SMPError, per queue.
   * @param {import("./types.js").Queue[]} queues
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<(SMPError | BadResponse | null)[]>}
   */
  async subscribeMany(queues, options = {}) {
    for (const q of queues) this.addQueue(q);
    const responses = await this.commands(
      queues.map((q) => [q.recipientId, { type: "SUB" }, q.rcvAuthSeed]),
      { ...options, routeMsg: true },
    );
    return responses.map((r) => errorOf(r, "OK", "SOK", "MSG"));
  }

  /**
   * ACK: the next message, if the router sends it along, becomes an event.
   * @param {import("./types.js").Queue} queue
   * @param {Uint8Array} msgId
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async ack(queue, msgId, options = {}) {
    this.addQueue(queue);
    const request = [queue.recipientId, { type: "ACK", msgId }, queue.rcvAuthSeed];
    const [r] = await this.commands([request], { ...options, routeMsg: true });
    expect(r, "OK", "MSG");
  }

  /**
   * GET: the head message as an event object, or null when the queue is empty.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<import("./types.js").MessageEvent | import("./types.js").UndecryptedEvent | null>}
   */
  async get(queue, options = {}) {
    this.addQueue(queue);
    const r = expect(await this.recipient(queue, { type: "GET" }, options), "OK", "MSG");
    return r.type === "OK" ? null : this.messageEvent(queue.recipientId, r);
  }

  /**
   * OFF: senders are refused from now on.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async suspend(queue, options = {}) {
    await this.recipientOk(queue, { type: "OFF" }, options);
  }

  /**
   * DEL: the queue and its messages are gone.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async delete(queue, options = {}) {
    await this.recipientOk(queue, { type: "DEL" }, options);
    this.forgetQueue(queue);
    forgetSigningKey(queue.rcvAuthSeed);
  }

  // --- sender -------------------------------------------------------------

  /**
   * SKEY: the sender secures the queue with its own key, signing with it.
   * @param {Uint8Array} senderId
   * @param {Uint8Array} senderSeed
   * @param {Uint8Array} senderKey the Ed25519 SPKI of `senderSeed`
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async secureSender(senderId, senderSeed, senderKey, options = {}) {
    expect(await this.command(senderId, { type: "SKEY", senderKey }, senderSeed, options), "OK");
  }

  /**
   * SEND `body`; signed when the queue is secured (`senderSeed`); `notify` sets flag T.
   * @param {Uint8Array} senderId
   * @param {Uint8Array} body
   * @param {{senderSeed?: Uint8Array | null, notify?: boolean} & import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async send(senderId, body, { senderSeed = null, notify = false, ...options } = {}) {
    const cmd = { type: "SEND", flags: notify ? "T" : "F", body };
    expect(await this.command(senderId, cmd, senderSeed, options), "OK");
  }

  /**
   * PING; the router answers PONG.
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async ping(options = {}) {
    expect(await this.command(EMPTY, { type: "PING" }, null, options), "PONG", "OK");
  }

  // --- notifications ------------------------------------------------------

  /**
   * NKEY with fresh keys.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<import("./types.js").NotifierCredentials>}
   */
  async enableNotifications(queue, options = {}) {
    const auth = crypto.newEd25519();
    const dh = crypto.newX25519();
    const cmd = { type: "NKEY", notifierKey: auth.publicKey, rcvNtfDhKey: dh.publicKey };
    const nid = expect(await this.recipient(queue, cmd, options), "NID");
    const creds = {
      recipientId: queue.recipientId,
      notifierId: nid.notifierId.slice(),
      notifierSeed: auth.seed,
      notifierKey: auth.publicKey,
      rcvNtfDhPriv: dh.privateKey,
      srvNtfDhKey: nid.srvNtfDhKey.slice(),
      ntfBoxKey: crypto.boxKey(dh.privateKey, nid.srvNtfDhKey),
    };
    this.addNotifier(creds);
    return creds;
  }

  /**
   * NSUB: NMSGs for this notifier arrive as "notification" events.
   * @param {import("./types.js").NotifierCredentials} creds
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async subscribeNotifications(creds, options = {}) {
    this.addNotifier(creds);
    expect(await this.command(creds.notifierId, { type: "NSUB" }, creds.notifierSeed, options), "OK", "SOK");
  }

  /**
   * NDEL.
   * @param {import("./types.js").Queue} queue
   * @param {import("./types.js").CommandOptions} [options]
   * @returns {Promise<void>}
   */
  async disableNotifications(queue, options = {}) {
    await this.recipientOk(queue, { type: "NDEL" }, options);
  }

  // --- helpers --------------------------------------------------------------

  /** @private */
  recipient(queue, cmd, options = {}) {
    return this.command(queue.recipientId, cmd, queue.rcvAuthSeed, options);
  }

  /** @private */
  async recipientOk(queue, cmd, options = {}) {
    expect(await this.recipient(queue, cmd, options), "OK");
  }
}

/** null when `response` is one of `types`, else the SMPError or BadResponse. */
function errorOf(response, ...types) {
  try {
    expect(response, ...types);
    return null;
  } catch (error) {
    return error;
  }
}

/** The command's name (its first word), for messages. */
function commandName(command) {
  const end = command.indexOf(0x20);
  return fromUtf8Lossy(end < 0 ? command : command.subarray(0, end)).replaceAll('"', "");
}

function fromUtf8Lossy(bytes) {
  try {
    return JSON.stringify(fromUtf8(bytes.subarray(0, 16)));
  } catch {
    return `<${bytes.length} bytes>`;
  }
}
