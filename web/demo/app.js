// The demo chat: two people, each with a queue on the same router.
//
// The one who creates the conversation (A) makes a queue and shares an
// invitation link whose fragment carries that queue's sender id. The other
// (B) opens the link: B makes a queue of its own, secures A's queue with a
// fresh sender key (SKEY) and sends "hello" with its own queue's sender id
// through it. A secures B's queue the same way and answers "hello-ack". From
// then on each side sends into the other's queue and receives from its own.
// Messages travel as small JSON documents: {t: "msg", id, text}; the receiver
// answers {t: "rcpt", id}, which marks the message delivered on the sender's side.
//
// Every document is end-to-end encrypted (e2e.js): the invitation carries the
// inviter's public key, the hello the joiner's, and each SEND body is a NaCl
// box only the other page opens. The router stores and forwards ciphertext.
//
// Everything (queues, keys, the peer, messages, handled msgIds) is kept in
// IndexedDB: a reload subscribes again and shows what arrived meanwhile once.

import {
  AUTH, DurableSubscription, IdentityMismatch, IndexedDBStore, SMPAgent, SMPError, crypto, fromBase64url,
  fromUtf8, toBase64url, utf8,
} from "../smp/index.js";
import { newKeyPair, parseEnvelope, seal, sealHello, sharedKey } from "./e2e.js";

const $ = (id) => document.getElementById(id);
const STATE_KEY = "demo/state";
const MSG_PREFIX = "demo/msg/";

let store;
let agent;
let subscription;
// {myQueue, peer: {senderId, seed, key}, peerConnected, peerLeft, role,
//  e2e: our key pair, peerE2eKey, shared: the key both pages box with}
let state = {};
let config;
const messages = new Map(); // id -> {id, dir, state, text, at}

// --- rendering ---------------------------------------------------------------

const STATUS_TEXT = { connected: "connected", connecting: "connecting…", offline: "offline", stopped: "offline" };

function showStatus(status) {
  const el = $("status");
  el.textContent = STATUS_TEXT[status] ?? status;
  el.dataset.state = status === "stopped" ? "offline" : status;
}

function showPeer() {
  const el = $("peer-status");
  let text = "not connected";
  let kind = "none";
  if (state.peerLeft) {
    text = "left";
    kind = "offline";
  } else if (state.peerConnected) {
    text = "connected";
    kind = "connected";
  } else if (state.myQueue) {
    text = state.role === "joiner" ? "joining…" : "waiting for the other side";
    kind = "connecting";
  }
  el.textContent = text;
  el.dataset.state = kind;
  $("create").hidden = Boolean(state.myQueue);
  $("reset").hidden = !state.myQueue;
  const inviting = state.role === "inviter" && state.myQueue && !state.peerConnected;
  $("invitation-row").hidden = !inviting;
  $("setup-hint").textContent = setupHint(inviting);
  const canSend = state.peerConnected && !state.peerLeft;
  $("send").disabled = !canSend;
  $("message").disabled = !canSend;
}

function setupHint(inviting) {
  if (state.peerLeft) return "The other side left this conversation. Leave it too to start a new one.";
  if (state.peerConnected) {
    return "Messages go through the router's queues, one queue for each direction, " +
      "end-to-end encrypted: the router holds only ciphertext.";
  }
  if (inviting) return "Open this link in another browser (or send it to someone) to start the conversation.";
  if (state.role === "joiner") return "Joining the conversation…";
  return "Create an invitation and open its link in another browser to chat.";
}

const STATE_LABEL = {
  sending: "sending…",
  sent: "sent ✓",
  delivered: "delivered ✓✓",
  received: "",
  failed: "not delivered: the other side left",
};

function renderMessages() {
  const list = $("messages");
  const sorted = [...messages.values()].sort((a, b) => a.at - b.at || (a.id < b.id ? -1 : 1));
  list.replaceChildren(
    ...sorted.map((m) => {
      const li = document.createElement("li");
      li.className = "message";
      li.dataset.dir = m.dir;
      li.dataset.state = m.state;
      li.dataset.id = m.id;
      const text = document.createElement("div");
      text.className = "text";
      text.textContent = m.text;
      const meta = document.createElement("div");
      meta.className = "meta";
      const time = new Date(m.at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      meta.textContent = [time, STATE_LABEL[m.state]].filter(Boolean).join(" · ");
      li.append(text, meta);
      return li;
    }),
  );
  $("empty").hidden = messages.size > 0;
  list.hidden = messages.size === 0;
  list.scrollTop = list.scrollHeight;
}

// --- state ---------------------------------------------------------------------

async function saveState() {
  await store.put(STATE_KEY, state);
  showPeer();
}

async function saveMessage(m) {
  messages.set(m.id, m);
  await store.put(MSG_PREFIX + m.id, m);
  renderMessages();
}

async function loadState() {
  state = (await store.get(STATE_KEY)) ?? {};
  for (const key of await store.keys(MSG_PREFIX)) {
    const m = await store.get(key);
    messages.set(m.id, m);
  }
}

// --- sending -----------------------------------------------------------------------

/** SEND a JSON document, boxed for the peer, to its queue, signed with our sender key; waits while offline. */
function sendToPeer(doc) {
  return sendSealed(seal(utf8(JSON.stringify(doc)), state.shared));
}

/** The joiner's hello: our queue, and our public key so the inviter can open it. */
function sendHello() {
  const doc = { t: "hello", q: toBase64url(state.myQueue.senderId) };
  return sendSealed(sealHello(utf8(JSON.stringify(doc)), state.e2e.publicKey, state.shared));
}

function sendSealed(body) {
  const { senderId, seed } = state.peer;
  return agent.withClient((client) => client.send(senderId, body, { senderSeed: seed }));
}

/** The JSON document in an envelope, and the key that opened it; null if it is not for us. */
function openEnvelope(body) {
  const envelope = parseEnvelope(body);
  if (!envelope || !state.e2e) return null;
  let key = state.shared;
  if (envelope.kind === "hello") {
    // Only the inviter takes a hello, and only from the peer it already has, if any.
    if (state.role !== "inviter") return null;
    if (state.peerE2eKey && toBase64url(state.peerE2eKey) !== toBase64url(envelope.senderKey)) return null;
    key = sharedKey(envelope.senderKey, state.e2e.secretKey);
  }
  const plain = key ? envelope.open(key) : null;
  if (!plain) return null;
  let doc;
  try {
    doc = JSON.parse(fromUtf8(plain));
  } catch {
    return null;
  }
  if ((envelope.kind === "hello") !== (doc?.t === "hello")) return null;
  return { doc, key, senderKey: envelope.senderKey };
}

async function sendMessage(text) {
  const m = { id: toBase64url(crypto.randomBytes(12)), dir: "out", state: "sending", text, at: Date.now() };
  await saveMessage(m);
  await deliverOut(m);
}

async function deliverOut(m) {
  try {
    await sendToPeer({ t: "msg", id: m.id, text: m.text });
  } catch (e) {
    console.warn("message not sent", e);
    // AUTH: the peer's queue is gone (the other side left); sending again cannot help.
    if (e instanceof SMPError && e.type === AUTH) {
      await saveMessage({ ...m, state: "failed" });
      state = { ...state, peerLeft: true };
      await saveState();
    }
    return; // otherwise it stays "sending" and is sent again on the next load
  }
  const current = messages.get(m.id);
  if (current && current.state === "sending") await saveMessage({ ...current, state: "sent" });
}

// --- receiving -----------------------------------------------------------------------

/** The durable subscription's handler: returns true as it stores the msgId with its own writes. */
async function receive(message) {
  const opened = openEnvelope(message.body);
  if (!opened) return false; // not ours, or not boxed for us: acknowledged and dropped
  const { doc } = opened;
  const writes = [message.seenEntry];
  const after = [];
  if (doc.t === "hello" && state.peer && toBase64url(state.peer.senderId) === doc.q) {
    after.push(() => sendToPeer({ t: "hello-ack" })); // our answer was lost: again
  } else if (doc.t === "hello" && typeof doc.q === "string" && !state.peer) {
    // B has joined: secure its queue with a key of ours and tell it so.
    const signer = crypto.newEd25519();
    const senderId = fromBase64url(doc.q);
    await agent.withClient((c) => c.secureSender(senderId, signer.seed, signer.publicKey));
    state = {
      ...state,
      peer: { senderId, seed: signer.seed, key: signer.publicKey },
      peerConnected: true,
      peerE2eKey: opened.senderKey,
      shared: opened.key,
    };
    writes.push([STATE_KEY, state]);
    after.push(() => sendToPeer({ t: "hello-ack" }));
  } else if (doc.t === "hello-ack") {
    state = { ...state, peerConnected: true };
    writes.push([STATE_KEY, state]);
  } else if (doc.t === "msg" && typeof doc.id === "string" && typeof doc.text === "string") {
    if (!messages.has(doc.id)) {
      const m = { id: doc.id, dir: "in", state: "received", text: doc.text, at: Date.now() };
      messages.set(m.id, m);
      writes.push([MSG_PREFIX + m.id, m]);
    }
    after.push(() => sendToPeer({ t: "rcpt", id: doc.id }));
  } else if (doc.t === "rcpt" && typeof doc.id === "string") {
    const m = messages.get(doc.id);
    if (m && m.dir === "out" && m.state !== "delivered") {
      const updated = { ...m, state: "delivered" };
      messages.set(m.id, updated);
      writes.push([MSG_PREFIX + m.id, updated]);
    }
  }
  await store.putMany(writes); // the msgId and what it changed, together
  showPeer();
  renderMessages();
  for (const task of after) task().catch((e) => console.warn(e));
  return true;
}

// --- conversation set-up ---------------------------------------------------------------

function invitationLink() {
  const invite = {
    v: 1,
    q: toBase64url(state.myQueue.senderId),
    k: config.keyHash,
    u: config.smpUrl,
    e: toBase64url(state.e2e.publicKey),
  };
  return `${location.origin}${location.pathname}#invite=${toBase64url(utf8(JSON.stringify(invite)))}`;
}

function showInvitation() {
  if (state.role === "inviter" && state.myQueue) $("invitation").value = invitationLink();
}

async function newQueue() {
  const client = await agent.connected();
  const queue = await client.createQueue({ sndSecure: true });
  await subscription.addQueue(queue);
  return queue;
}

async function createConversation() {
  $("create").disabled = true;
  try {
    state = { role: "inviter", myQueue: await newQueue(), peerConnected: false, e2e: newKeyPair() };
    await saveState();
    showInvitation();
  } finally {
    $("create").disabled = false;
  }
}

async function join(inviteText) {
  const invite = JSON.parse(fromUtf8(fromBase64url(inviteText)));
  if (invite.k !== config.keyHash) throw new Error("the invitation is for another router");
  if (typeof invite.e !== "string") throw new Error("the invitation has no encryption key: create a new one");
  const peerSenderId = fromBase64url(invite.q);
  const e2e = newKeyPair();
  const shared = sharedKey(fromBase64url(invite.e), e2e.secretKey);
  const myQueue = await newQueue();
  const signer = crypto.newEd25519();
  await agent.withClient((c) => c.secureSender(peerSenderId, signer.seed, signer.publicKey));
  state = {
    role: "joiner",
    myQueue,
    peer: { senderId: peerSenderId, seed: signer.seed, key: signer.publicKey },
    peerConnected: false,
    e2e,
    shared,
  };
  await saveState();
  await sendHello();
}

async function leave() {
  if (!confirm("Leave this conversation? Its queue and messages are deleted.")) return;
  const queue = state.myQueue;
  try {
    await (await agent.connected()).delete(queue);
  } catch (e) {
    console.warn("queue not deleted", e);
  }
  await subscription.removeQueue(queue.recipientId);
  for (const key of await store.keys(MSG_PREFIX)) await store.delete(key);
  await store.delete(STATE_KEY);
  messages.clear();
  state = {};
  renderMessages();
  showPeer();
}

// --- start ----------------------------------------------------------------------------------

async function main() {
  config = await (await fetch("config.json", { cache: "no-store" })).json();
  $("router-address").textContent = config.address ?? "";
  store = await IndexedDBStore.open("smp-demo");
  await loadState();
  renderMessages();
  showPeer();

  agent = new SMPAgent({ url: config.smpUrl, keyHash: fromBase64url(config.keyHash) });
  agent.onEvent((ev) => {
    if (ev.type === "status") showStatus(ev.status);
    if (ev.type === "status" && ev.error instanceof IdentityMismatch) {
      // The router at this address is not the one the page was loaded for
      // (restarted without its data, say): the page's key hash is stale.
      report(new Error("the router has a new identity since this page was loaded: reload the page"));
    }
    if (ev.type === "removed") console.warn("queue no longer subscribed:", ev.reason);
  });
  subscription = new DurableSubscription(agent, store, receive, {
    onEvent: (ev) => ev.type === "handler-error" && console.warn("message not handled", ev.error),
  });
  await subscription.restore();
  agent.start();
  addEventListener("online", () => agent.reconnectNow());

  $("create").addEventListener("click", () => createConversation().catch(report));
  $("reset").addEventListener("click", () => leave().catch(report));
  $("copy").addEventListener("click", copyInvitation);
  $("create").disabled = false;
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("message").value.trim();
    if (!text || !state.peerConnected || state.peerLeft) return;
    $("message").value = "";
    sendMessage(text).catch(report);
  });

  showInvitation();
  const invite = new URLSearchParams(location.hash.slice(1)).get("invite");
  if (invite) {
    history.replaceState(null, "", location.pathname); // a reload must not join again
    if (!state.myQueue) await join(invite);
    else {
      // This browser's storage already holds a conversation (a second tab shares it).
      $("setup-hint").textContent =
        "This browser is already in a conversation: open the invitation in another browser " +
        "or a private window, or leave this conversation first.";
    }
  }
  // A join whose "hello" may not have gone out before the page went away.
  if (state.role === "joiner" && !state.peerConnected) {
    sendHello().catch(report);
  }
  // Messages that were still being sent when the page went away.
  for (const m of messages.values()) if (m.dir === "out" && m.state === "sending") deliverOut(m);
}

/** Copy the invitation link; plain-http pages have no navigator.clipboard, so select it instead. */
async function copyInvitation() {
  const input = $("invitation");
  const button = $("copy");
  try {
    await navigator.clipboard.writeText(input.value);
    button.textContent = "Copied";
  } catch {
    input.select();
    button.textContent = "Selected: copy it";
  }
  setTimeout(() => {
    button.textContent = "Copy";
  }, 2000);
}

function report(e) {
  console.error(e);
  $("setup-hint").textContent = `Something went wrong: ${e.message ?? e}`;
}

main().catch(report);
