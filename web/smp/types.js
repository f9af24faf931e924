// The shapes the client hands out and takes, for type checkers (types/*.d.ts
// is generated from these JSDoc comments). No code.

/**
 * A queue as its recipient holds it: plain Uint8Arrays and a boolean, so
 * IndexedDB (structured clone) stores it as it is.
 * @typedef {object} Queue
 * @property {Uint8Array} recipientId
 * @property {Uint8Array} senderId the id a sender uses (SEND, SKEY)
 * @property {Uint8Array} rcvAuthSeed Ed25519 seed that signs the recipient's commands
 * @property {Uint8Array} rcvAuthKey its public key (SPKI)
 * @property {Uint8Array} rcvDhPriv X25519 private key for the router's per-queue encryption
 * @property {Uint8Array} srvDhKey the router's X25519 key for this queue (SPKI)
 * @property {Uint8Array} boxKey the precomputed crypto_box key that opens MSG bodies
 * @property {boolean} sndSecure whether the sender secures the queue itself (SKEY)
 */

/**
 * What NKEY made: the notifier's keys, and the key that opens NMSG metadata.
 * @typedef {object} NotifierCredentials
 * @property {Uint8Array} recipientId
 * @property {Uint8Array} notifierId
 * @property {Uint8Array} notifierSeed
 * @property {Uint8Array} notifierKey
 * @property {Uint8Array} rcvNtfDhPriv
 * @property {Uint8Array} srvNtfDhKey
 * @property {Uint8Array} ntfBoxKey
 */

/**
 * Options every command method takes last.
 * @typedef {object} CommandOptions
 * @property {AbortSignal} [signal] abandons the command: it rejects with the signal's reason
 * @property {number} [timeout] ms to wait for the answer (default: the connection's commandTimeout; 0: no limit)
 */

/**
 * A message, its body opened with the queue's key.
 * @typedef {object} MessageEvent
 * @property {"message"} type
 * @property {Uint8Array} recipientId
 * @property {Uint8Array} msgId
 * @property {number} ts seconds since the epoch, when the router took it
 * @property {Uint8Array} flags
 * @property {Uint8Array} body
 * @property {boolean} quota true for the marker the router puts in a full queue (body empty)
 */

/**
 * A message whose body did not open (no key for the queue on this connection, or a bad box).
 * @typedef {object} UndecryptedEvent
 * @property {"undecrypted"} type
 * @property {Uint8Array} recipientId
 * @property {Uint8Array} msgId
 * @property {Uint8Array} encBody
 */

/**
 * Another connection subscribed the queue: this one gets no more of its messages.
 * @typedef {object} EndEvent
 * @property {"end"} type
 * @property {Uint8Array} recipientId
 */

/**
 * The queue was deleted.
 * @typedef {object} DeletedEvent
 * @property {"deleted"} type
 * @property {Uint8Array} recipientId
 */

/**
 * A notification (NMSG); msgId and ts are null unless this connection holds the notifier's key.
 * @typedef {object} NotificationEvent
 * @property {"notification"} type
 * @property {Uint8Array} notifierId
 * @property {Uint8Array} nonce
 * @property {Uint8Array} encMeta
 * @property {Uint8Array | null} msgId
 * @property {number | null} ts
 */

/**
 * A transmission the client could not place: an answer nobody waits for, or a push it does not know.
 * @typedef {object} RawEvent
 * @property {"raw"} type
 * @property {Uint8Array} corrId
 * @property {Uint8Array} entityId
 * @property {Uint8Array} command
 * @property {{type: string, [field: string]: unknown} | null} response
 */

/**
 * What an SMPClient pushes to `onEvent` / `nextEvent`; tell them apart by `type`.
 * @typedef {MessageEvent | UndecryptedEvent | EndEvent | DeletedEvent | NotificationEvent
 *   | RawEvent} ClientEvent
 */

/**
 * The agent's connection state.
 * @typedef {object} StatusEvent
 * @property {"status"} type
 * @property {"connecting" | "connected" | "offline" | "stopped"} status
 * @property {Error | null} [error] why it is offline
 */

/**
 * A queue the agent keeps subscribed was subscribed (on each connection).
 * @typedef {object} UpEvent
 * @property {"up"} type
 * @property {Queue[]} queues
 */

/**
 * A queue left the agent's set: refused with AUTH, taken over (END), or deleted (DELD).
 * @typedef {object} RemovedEvent
 * @property {"removed"} type
 * @property {Queue} queue
 * @property {"refused" | "end" | "deleted"} reason
 * @property {Error | null} error
 */

/**
 * A SUB failed for a reason that may pass (it is sent again later).
 * @typedef {object} SubscribeErrorEvent
 * @property {"subscribe-error"} type
 * @property {Queue} queue
 * @property {Error} error
 */

/**
 * A client event as the agent passes it on: with the connection it came on,
 * and for messages the queue (needed to ACK).
 * @typedef {(MessageEvent | UndecryptedEvent) & {queue: Queue | undefined, client: import("./client.js").SMPClient}} AgentMessageEvent
 */

/**
 * What an SMPAgent hands to its listeners.
 * @typedef {StatusEvent | UpEvent | RemovedEvent | SubscribeErrorEvent | AgentMessageEvent
 *   | ((NotificationEvent | RawEvent) & {client: import("./client.js").SMPClient})} AgentEvent
 */

/**
 * A message as DurableSubscription hands it to the application's handler.
 * @typedef {object} DurableMessage
 * @property {Uint8Array} recipientId
 * @property {Uint8Array} msgId
 * @property {number} ts
 * @property {Uint8Array} flags
 * @property {Uint8Array} body
 * @property {Queue} queue
 * @property {[string, string[]]} seenEntry store it with your own writes (store.putMany) and return true
 */

/**
 * The storage DurableSubscription keeps its state in (IndexedDBStore, MemoryStore, or your own).
 * @typedef {object} KeyValueStore
 * @property {(key: string) => Promise<any>} get
 * @property {(key: string, value: any) => Promise<void>} put
 * @property {(entries: [string, any][]) => Promise<void>} putMany all or none
 * @property {(key: string) => Promise<void>} delete
 * @property {(prefix?: string) => Promise<string[]>} keys sorted
 */

export {};
