// tweetnacl (npm package "tweetnacl" 1.0.3): NaCl crypto_box, X25519 and
// Ed25519 verification. An ordinary import, so bundlers and Node resolve it
// from node_modules; the package is CommonJS, its default export the library.
//
// Its random bytes come from WebCrypto's getRandomValues (browsers, Node 20+,
// Deno, workers), set here rather than left to tweetnacl's own detection: that
// looks for `self.crypto`, which Node has not, and then for `require("crypto")`,
// which an ES module bundle has not (a bundle loaded by Node threw "no PRNG").

import nacl from "tweetnacl";

// getRandomValues fills at most 65,536 bytes per call.
const RANDOM_CHUNK = 65536;

const webCrypto = globalThis.crypto;
if (webCrypto?.getRandomValues) {
  nacl.setPRNG((/** @type {Uint8Array} */ out, /** @type {number} */ length) => {
    for (let at = 0; at < length; at += RANDOM_CHUNK) {
      webCrypto.getRandomValues(out.subarray(at, Math.min(length, at + RANDOM_CHUNK)));
    }
  });
}

export default nacl;
