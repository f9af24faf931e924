// DurableSubscription: every message handed to the application once, across
// dropped connections and page reloads.
//
//   const store = await IndexedDBStore.open();
//   const sub = new DurableSubscription(agent, store, async (message) => { ... });
//   await sub.restore();        // the queues of earlier visits, subscribed again
//   await sub.addQueue(queue);  // stored, and kept subscribed
//
// The router keeps a message until it is acknowledged and delivers it again
// to the next subscription when the ACK did not reach it. So a message is
// acknowledged only after the handler has finished with it, and its msgId
// is recorded before the ACK. A redelivery of a message whose msgId is
// recorded is acknowledged without being handed over again. The router
// delivers one unacknowledged message per queue at a time, so the handler is
// called for one message of a queue at a time, in order. A handler that
// throws leaves its message unacknowledged: it comes again after the next
// reconnection (at least once). A handler that records what it did under
// keys of its own in the same `store.putMany` as `message.seenEntry` applies
// each message exactly once.

import { fromBase64url, toBase64url, toHex } from "./bytes.js";

const QUEUE_PREFIX = "smp/queue/";
const SEEN_PREFIX = "smp/seen/";
export const DEFAULT_REMEMBER = 256; // msgIds kept per queue

export class DurableSubscription {
  /**
   * @param {import("./agent.js").SMPAgent} agent
   * @param {import("./types.js").KeyValueStore} store
   * @param {(message: import("./types.js").DurableMessage) => Promise<boolean | void> | boolean | void} handler
   * @param {{remember?: number, onEvent?: ((event: any) => void) | null}} [options]
   */
  constructor(agent, store, handler, { remember = DEFAULT_REMEMBER, onEvent = null } = {}) {
    this.agent = agent;
    this.store = store;
    this.handler = handler;
    this.remember = remember;
    this.onEvent = onEvent;
    this.chains = new Map(); // hex(recipientId) -> promise of the message being handled
    this.stats = { delivered: 0, duplicates: 0, quotaMarkers: 0, undecryptable: 0, handlerErrors: 0 };
    this.unsubscribe = agent.onEvent((event) => this.received(event));
  }

  /**
   * Subscribe the queues stored by earlier visits; resolves to them.
   * @returns {Promise<import("./types.js").Queue[]>}
   */
  async restore() {
    const queues = [];
    for (const key of await this.store.keys(QUEUE_PREFIX)) {
      const queue = await this.store.get(key);
      if (queue) {
        queues.push(queue);
        this.agent.addQueue(queue);
      }
    }
    return queues;
  }

  /**
   * Store `queue` and keep it subscribed.
   * @param {import("./types.js").Queue} queue
   */
  async addQueue(queue) {
    await this.store.put(QUEUE_PREFIX + toBase64url(queue.recipientId), queue);
    this.agent.addQueue(queue);
  }

  /**
   * Forget the queue here and in the store (the router is not told: use DEL for that).
   * @param {Uint8Array} recipientId
   */
  async removeQueue(recipientId) {
    this.agent.removeQueue(recipientId);
    const id = toBase64url(recipientId);
    await this.store.delete(QUEUE_PREFIX + id);
    await this.store.delete(SEEN_PREFIX + id);
  }

  close() {
    this.unsubscribe();
  }

  /**
   * @private
   */
  received(event) {
    if (event.type !== "message" && event.type !== "undecrypted") {
      this.onEvent?.(event);
      return;
    }
    const key = toHex(event.recipientId);
    const previous = this.chains.get(key) ?? Promise.resolve();
    const next = previous.then(() => this.handle(event));
    this.chains.set(key, next);
    next.finally(() => {
      if (this.chains.get(key) === next) this.chains.delete(key);
    });
  }

  /** Resolves once every message received so far has been handled (for tests). */
  async idle() {
    while (this.chains.size) await Promise.allSettled([...this.chains.values()]);
  }

  /**
   * @private
   */
  async handle(event) {
    try {
      await this.handleOne(event);
    } catch (error) {
      this.stats.handlerErrors++;
      this.onEvent?.({ type: "handler-error", error, event });
    }
  }

  /**
   * @private
   */
  async handleOne(event) {
    if (event.type === "undecrypted" || event.quota) {
      // Nothing to hand over; left unacknowledged it would block its queue for good.
      if (event.quota) this.stats.quotaMarkers++;
      else this.stats.undecryptable++;
      await this.agent.ack(event);
      this.onEvent?.(event);
      return;
    }
    const seenKey = SEEN_PREFIX + toBase64url(event.recipientId);
    const seen = (await this.store.get(seenKey)) ?? [];
    const id = toBase64url(event.msgId);
    if (seen.includes(id)) {
      this.stats.duplicates++;
      await this.agent.ack(event);
      return;
    }
    const updated = [...seen, id].slice(-this.remember);
    const message = {
      recipientId: event.recipientId,
      msgId: event.msgId,
      ts: event.ts,
      flags: event.flags,
      body: event.body,
      queue: event.queue,
      seenEntry: [seenKey, updated],
    };
    const recorded = await this.handler(message);
    // A handler that stored seenEntry with its own writes returns true.
    if (recorded !== true) await this.store.put(seenKey, updated);
    this.stats.delivered++;
    await this.agent.ack(event);
  }
}

/**
 * The recipient ids of the queues a store holds (for inspection).
 * @param {import("./types.js").KeyValueStore} store
 * @returns {Promise<Uint8Array[]>}
 */
export async function storedQueueIds(store) {
  return (await store.keys(QUEUE_PREFIX)).map((k) => fromBase64url(k.slice(QUEUE_PREFIX.length)));
}
