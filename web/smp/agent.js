// SMPAgent: a connection to one router that comes back by itself.
//
//   const agent = new SMPAgent({ url, keyHash });
//   agent.onEvent((ev) => ...);   // {type: "status" | "message" | "end" | "deleted" | ...}
//   agent.addQueue(queue);        // kept subscribed across reconnections
//   agent.start();
//   const client = await agent.connected();   // the current SMPClient
//
// The agent keeps the queues the application wants subscribed. Each time it
// connects it sends SUB for all of them, packed into few blocks. When the
// connection ends it reports "offline", waits Backoff.delay(n) (exponential,
// with jitter) and connects again, and so on until stop(). A queue the router
// refuses with AUTH (deleted, or wrong keys), and a queue another connection
// took over (END) or that was deleted (DELD), leaves the set, with an event.
// Other SUB errors are taken as temporary: SUB again after a delay.
//
// Every failed connect is retried with backoff, a wrong router identity
// (IdentityMismatch) too: the router at the address may be replaced by the
// right one, and the delays grow, so a wrong address costs little. The
// "offline" status event carries the error, so a page can tell it apart
// (`ev.error instanceof IdentityMismatch`) and ask for another address.
//
// Each connection checks itself (the client's keepalive): after `pingInterval`
// ms without a block from the router it sends PING, and a PING unanswered for
// `pingTimeout` ms closes it, so a silently dead socket (a laptop that slept,
// a NAT that forgot the connection) is replaced instead of waited on.

import { toHex } from "./bytes.js";
import { Backoff } from "./backoff.js";
import { connect } from "./client.js";
import { AUTH, ConnectionClosed } from "./errors.js";

export class SMPAgent {
  /**
   * @param {{url: string, keyHash: Uint8Array, WebSocket?: any, backoff?: Backoff, random?: () => number,
   *   timeout?: number, commandTimeout?: number, pingInterval?: number, pingTimeout?: number}} options
   *   `timeout`: ms for each connect and handshake; `commandTimeout`, `pingInterval`,
   *   `pingTimeout`: as for `connect`, for every connection the agent makes.
   */
  constructor({
    url, keyHash, WebSocket, backoff = new Backoff(), random = Math.random, timeout,
    commandTimeout, pingInterval, pingTimeout,
  }) {
    this.url = url;
    this.keyHash = keyHash;
    this.backoff = backoff;
    this.random = random;
    this.connectOptions = { WebSocket, timeout, commandTimeout, pingInterval, pingTimeout };
    this.queues = new Map(); // hex(recipientId) -> queue
    this.listeners = new Set();
    this.status = "stopped";
    this.client = null;
    this.stopped = true;
    this.waitingForClient = [];
    this.wakeUp = null;
  }

  /**
   * Call `listener(event)` for every event; returns a function that stops it.
   * @param {(event: import("./types.js").AgentEvent) => void} listener
   * @returns {() => void}
   */
  onEvent(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * @private
   */
  emit(event) {
    for (const listener of this.listeners) listener(event);
  }

  /**
   * @private
   */
  setStatus(status, detail = {}) {
    this.status = status;
    this.emit({ type: "status", status, ...detail });
  }

  /** Start connecting (and reconnecting) in the background. */
  start() {
    if (!this.stopped) return;
    this.stopped = false;
    this.loop = this.run();
  }

  /** Stop reconnecting and close the connection. */
  async stop() {
    if (this.stopped) return;
    this.stopped = true;
    this.wakeUp?.();
    this.client?.close();
    await this.loop;
    const error = new ConnectionClosed("agent stopped", { local: true });
    for (const w of this.waitingForClient.splice(0)) w.reject(error);
    this.setStatus("stopped");
  }

  /** Connect again now rather than after the current delay (e.g. when the browser goes online). */
  reconnectNow() {
    this.wakeUp?.();
  }

  /**
   * The current client once connected (waits while offline). `signal` (an
   * AbortSignal) gives up waiting: rejects with its reason.
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<import("./client.js").SMPClient>}
   */
  connected({ signal } = {}) {
    if (this.client && !this.client.closed) return Promise.resolve(this.client);
    if (this.stopped) return Promise.reject(new ConnectionClosed("agent stopped", { local: true }));
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: (client) => {
          signal?.removeEventListener("abort", aborted);
          resolve(client);
        },
        reject: (error) => {
          signal?.removeEventListener("abort", aborted);
          reject(error);
        },
      };
      const aborted = () => {
        this.waitingForClient = this.waitingForClient.filter((w) => w !== waiter);
        reject(signal.reason);
      };
      signal?.addEventListener("abort", aborted, { once: true });
      this.waitingForClient.push(waiter);
    });
  }

  /**
   * Run `fn(client)` on a connected client; if the connection drops under it,
   * again on the next one. `signal` ends the waiting and the retries (the
   * reason is thrown); pass it on to the commands `fn` sends to abandon them too.
   * @template T
   * @param {(client: import("./client.js").SMPClient) => Promise<T>} fn
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<T>}
   */
  async withClient(fn, { signal } = {}) {
    for (;;) {
      signal?.throwIfAborted();
      const client = await this.connected({ signal });
      try {
        return await fn(client);
      } catch (e) {
        if (!(e instanceof ConnectionClosed) || this.stopped) throw e;
      }
    }
  }

  /**
   * Keep `queue` subscribed from now on (SUB now if connected).
   * @param {import("./types.js").Queue} queue
   */
  addQueue(queue) {
    const key = toHex(queue.recipientId);
    if (this.queues.has(key)) return;
    this.queues.set(key, queue);
    const client = this.client;
    if (client && !client.closed) this.subscribe(client, [queue]);
  }

  /**
   * Stop keeping the queue subscribed (no command is sent).
   * @param {Uint8Array} recipientId
   * @returns {boolean}
   */
  removeQueue(recipientId) {
    return this.queues.delete(toHex(recipientId));
  }

  /**
   * ACK a message delivered by `client` (the event's `client`). Returns false
   * without sending when that connection is gone: the router delivers the
   * message again to the next one.
   * @param {import("./types.js").AgentMessageEvent} event
   * @returns {Promise<boolean>}
   */
  async ack(event) {
    if (!event.queue || event.client !== this.client || event.client.closed) return false;
    try {
      await event.client.ack(event.queue, event.msgId);
    } catch (e) {
      if (e instanceof ConnectionClosed) return false;
      throw e;
    }
    return true;
  }

  // --- inside ---------------------------------------------------------------

  /**
   * @private
   */
  async run() {
    let attempt = 0;
    while (!this.stopped) {
      this.setStatus("connecting");
      let client;
      try {
        client = await connect(this.url, this.keyHash, this.connectOptions);
      } catch (error) {
        if (this.stopped) break;
        this.setStatus("offline", { error });
        await this.sleep(this.backoff.delay(attempt++, this.random));
        continue;
      }
      if (this.stopped) {
        client.close();
        break;
      }
      attempt = 0;
      await this.serve(client);
      if (this.stopped) break;
      this.setStatus("offline", { error: client.closed });
      await this.sleep(this.backoff.delay(attempt++, this.random));
    }
  }

  /**
   * Use `client` until its connection ends.
   * @private
   */
  async serve(client) {
    this.client = client;
    client.onEvent((event) => this.received(client, event));
    this.setStatus("connected");
    for (const w of this.waitingForClient.splice(0)) w.resolve(client);
    this.subscribe(client, [...this.queues.values()]);
    await client.whenClosed();
    this.client = null;
  }

  /**
   * @private
   */
  async subscribe(client, queues, attempt = 0) {
    if (!queues.length) return;
    let errors;
    try {
      errors = await client.subscribeMany(queues);
    } catch (e) {
      if (e instanceof ConnectionClosed) return; // the next connection subscribes them
      throw e;
    }
    const up = [];
    const again = [];
    queues.forEach((queue, i) => {
      const error = errors[i];
      if (!error) up.push(queue);
      else if (error.type === AUTH) this.drop(queue.recipientId, "refused", error);
      else {
        again.push(queue);
        this.emit({ type: "subscribe-error", queue, error });
      }
    });
    if (up.length) this.emit({ type: "up", queues: up });
    if (again.length) this.retryLater(client, again, attempt);
  }

  /**
   * A temporary refusal (INTERNAL, say): SUB again after a delay, on the same connection.
   * @private
   */
  retryLater(client, queues, attempt) {
    setTimeout(() => {
      if (client !== this.client || client.closed) return; // the next connection subscribes them
      const still = queues.filter((q) => this.queues.get(toHex(q.recipientId)) === q);
      this.subscribe(client, still, attempt + 1);
    }, this.backoff.delay(attempt, this.random));
  }

  /**
   * @private
   */
  drop(recipientId, reason, error = null) {
    const key = toHex(recipientId);
    const queue = this.queues.get(key);
    if (!queue) return;
    this.queues.delete(key);
    this.emit({ type: "removed", queue, reason, error });
  }

  /**
   * @private
   */
  received(client, event) {
    if (client !== this.client) return; // a message from a replaced connection comes again
    const queue = event.recipientId ? this.queues.get(toHex(event.recipientId)) : undefined;
    switch (event.type) {
      case "end":
        this.drop(event.recipientId, "end");
        return;
      case "deleted":
        this.drop(event.recipientId, "deleted");
        return;
      case "message":
      case "undecrypted":
        this.emit({ ...event, queue: queue ?? client.queues.get(toHex(event.recipientId)), client });
        return;
      default:
        this.emit({ ...event, client });
    }
  }

  /**
   * @private
   */
  sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeUp = done;
    }).finally(() => {
      this.wakeUp = null;
    });
  }
}
