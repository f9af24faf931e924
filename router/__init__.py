"""smp-router: the SimpleX Messaging Protocol and both of its ends.

Layers, each importing only those before it (docs/architecture.md; checked by
tests/test_architecture.py):

1. `router.protocol`: the codec, pure (bytes in, values out; the standard
   library and nacl only, no trio, no sockets).
2. `store` (beside this package): queue and message stores; the protocol's
   values, never the router.
3. `router.server` (the router, on the stores) and `router.client` (the
   client library, on the protocol alone).
4. `router.gateway`: the router embedded with a browser-facing site, on top of
   `router.server`.
"""
