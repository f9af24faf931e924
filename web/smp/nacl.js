// tweetnacl (npm package "tweetnacl" 1.0.3): NaCl crypto_box, X25519 and
// Ed25519 verification. An ordinary import, so bundlers and Node resolve it
// from node_modules; the package is CommonJS, its default export the library.

import nacl from "tweetnacl";

export default nacl;
