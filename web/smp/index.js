// The SMP client for browsers: everything a page needs, from one module.
//
//   import { connect, SMPAgent, DurableSubscription, IndexedDBStore } from "/smp/index.js";

export * from "./bytes.js";
export * from "./block.js";
export * from "./codec.js";
export * from "./encoding.js";
export * from "./errors.js";
export * from "./handshake.js";
export * from "./keys.js";
export * from "./transmission.js";
export * as crypto from "./crypto.js";
export * as versions from "./versions.js";
export { BlockCipher, chainInit, chainStep } from "./blockcrypto.js";
export { connect, SMPClient } from "./client.js";
export { Backoff } from "./backoff.js";
export { SMPAgent } from "./agent.js";
export { DurableSubscription, storedQueueIds, DEFAULT_REMEMBER } from "./durable.js";
export { IndexedDBStore, MemoryStore } from "./store.js";
export { parseRouterAddress, formatRouterAddress, wsUrl } from "./address.js";
export * from "./types.js";
