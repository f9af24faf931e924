"""The router as a destination: RFWD from a proxy (docs/protocol.md#private-message-routing).

A proxy's RFWD holds one transmission of a client that this router never sees, in
two boxes: the outer one with the proxy connection's session secret (this router's
hello key and the proxy's) and the RFWD's corrId as nonce, the inner one with the
client's fresh key and this router's hello key. Opened, the transmission is
verified as if the client had sent it on the proxy's connection (its signature
covers that connection's session id, which PKEY gave the client) at the version the
client encoded it at, and executed. Only what a sender does may be forwarded (SEND,
SKEY, LKEY, LGET; anything else is answered CMD PROHIBITED), as the reference
allows. The answer goes back in the same two boxes, RRES.

Errors of the RFWD itself are answered to the proxy in the clear, as the reference
does: a box that does not open `CRYPTO`, a forwarded transmission that does not parse
`CMD SYNTAX`, more or less than one transmission `BLOCK`, a connection without a
hello key `PROXY BROKER TRANSPORT NO_AUTH`. Errors of the client's command (AUTH,
QUOTA, ...) go back inside RRES, for the client only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from router.protocol import proxying
from router.protocol.codec import encode_response_transmission
from router.protocol.errors import TRANSPORT_NO_AUTH, proxy_transport_error
from router.protocol.handshake import SMP_VERSION_MAX, SMP_VERSION_MIN
from router.protocol.types import CMD_SYNTAX, INTERNAL, RFWD, RRES, ErrorType, ProtocolError

from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from .connection import Connection
    from .counters import Counters
    from .subscriptions import ClientSubscriptions

# Verifies one forwarded transmission at the client's version (dispatch.py).
VerifyForwarded = Callable[["Connection", bytes, int], Awaitable["Verified | bytes"]]
Execute = Callable[["ClientSubscriptions", Verified], Awaitable[list[bytes]]]


class Forwarded:
    """Answers RFWD; the dispatcher gives it its verification and execution."""

    def __init__(self, counters: Counters, verify: VerifyForwarded, execute: Execute) -> None:
        self._counters = counters
        self._verify = verify
        self._execute = execute
        # A proxy connection's session secret, made at its first RFWD (one X25519 less per
        # forwarded command); forgotten with the connection.
        self._secrets: WeakKeyDictionary[Connection, bytes] = WeakKeyDictionary()

    async def answer(self, client: ClientSubscriptions, rfwd: Verified) -> list[bytes]:
        conn = client.conn
        cmd: RFWD = rfwd.command  # type: ignore[assignment]
        private, proxy_key = conn.router_dh_private, conn.client_key
        if private is None or proxy_key is None:
            return _refuse(rfwd, proxy_transport_error(TRANSPORT_NO_AUTH))
        try:
            secret = self._secrets.get(conn)
            if secret is None:
                secret = self._secrets[conn] = proxying.session_secret(private, proxy_key)
            forwarded = proxying.unwrap_forward(secret, rfwd.corr_id, cmd.enc_fwd_transmission,
                                                private)
        except ProtocolError as e:
            return _refuse(rfwd, e.error)
        if not SMP_VERSION_MIN <= forwarded.version <= SMP_VERSION_MAX:
            return _refuse(rfwd, CMD_SYNTAX)  # a version this router cannot read it at
        inner = await self._verify(conn, forwarded.transmission, forwarded.version)
        answers = [inner] if isinstance(inner, bytes) else await self._execute(client, inner)
        if len(answers) != 1:  # a sender's command has one answer
            return _refuse(rfwd, INTERNAL)
        self._counters.proxy_messages_received += 1
        body = proxying.encrypt_forwarded_response(forwarded, answers[0], secret, rfwd.corr_id)
        return [encode_response_transmission(rfwd.corr_id, rfwd.entity_id, RRES(body),
                                             rfwd.version)]


def _refuse(rfwd: Verified, error: ErrorType) -> list[bytes]:
    return [error_transmission(rfwd.corr_id, rfwd.entity_id, error, rfwd.version)]
