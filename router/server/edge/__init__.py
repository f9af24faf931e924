"""The edge: listening, WebSocket and HTTP, the block transports, the handshake, the identity."""
