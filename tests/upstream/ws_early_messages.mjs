// Preloaded into the upstream web client's REPL under Node (node --import).
//
// Under Node, the `ws` package may emit the router's first block in the same tick as the
// `open` event, before the client has set its `onmessage` handler; the block is then
// lost and the connect waits for ever (../shared/upstream/README.md: a client-side race
// that browsers do not have). This keeps every `message` event emitted while no
// listener is attached and hands them, in order, to the next listener attached.
//
// The project's own code; the client itself runs unmodified.
import {createRequire} from "node:module"
import path from "node:path"

const clientDir = process.env.SMP_UPSTREAM_CLIENT_DIR
if (!clientDir) throw new Error("SMP_UPSTREAM_CLIENT_DIR is not set")
const WebSocket = createRequire(path.join(clientDir, "package.json"))("ws")

const held = Symbol("held messages")
const originalEmit = WebSocket.prototype.emit
const originalAdd = WebSocket.prototype.addListener

WebSocket.prototype.emit = function (event, ...args) {
  if (event === "message" && this.listenerCount("message") === 0) {
    ;(this[held] ??= []).push(args)
    return true
  }
  return originalEmit.call(this, event, ...args)
}

function flushTo(ws) {
  const pending = ws[held]
  if (!pending || pending.length === 0) return
  setImmediate(() => {
    while (ws[held].length > 0 && ws.listenerCount("message") > 0) {
      originalEmit.call(ws, "message", ...ws[held].shift())
    }
  })
}

for (const name of ["addListener", "on"]) {
  const original = name === "on" ? WebSocket.prototype.on : originalAdd
  WebSocket.prototype[name] = function (event, listener) {
    const result = original.call(this, event, listener)
    if (event === "message") flushTo(this)
    return result
  }
}
