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

In a router of several workers the RFWD is opened where the proxy's connection
landed, and its transmission runs in the worker that owns its queue (`ForwardRoute`,
docs/workers.md#hand-offs-in-blocks): a block's RFWDs for one other worker go to it
together, before the block's other commands run here; their answers keep their places.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol
from weakref import WeakKeyDictionary

import trio

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


class ForwardRoute(Protocol):
    """Where a forwarded transmission's queue is served when the router is several
    workers (docs/workers.md#hand-offs-in-blocks): the front opens the RFWD, the owner
    of the inner transmission's queue verifies and runs it, the front seals the answer."""

    def owner_elsewhere(self, transmission: bytes, version: int) -> int | None:
        """The other worker that owns the transmission's queue; None if this one does
        (or it does not parse: it is answered here)."""
        ...

    async def run_elsewhere(self, client: ClientSubscriptions, owner: int,
                            forwarded: list[tuple[bytes, int]]) -> list[list[bytes]]:
        """The answers of `owner` to each (transmission, version), in their order."""
        ...


class Forwarded:
    """Answers RFWD; the dispatcher gives it its verification and execution."""

    def __init__(self, counters: Counters, verify: VerifyForwarded, execute: Execute) -> None:
        self._counters = counters
        self._verify = verify
        self._execute = execute
        # A proxy connection's session secret, made at its first RFWD (one X25519 less per
        # forwarded command); forgotten with the connection.
        self._secrets: WeakKeyDictionary[Connection, bytes] = WeakKeyDictionary()
        self.route: ForwardRoute | None = None  # set in a worker of several

    async def answer(self, client: ClientSubscriptions, rfwd: Verified) -> list[bytes]:
        opened = self._open(client.conn, rfwd)
        if isinstance(opened, list):
            return opened
        forwarded, secret = opened
        return self._seal(rfwd, forwarded, secret, await self.run_here(
            client, forwarded.transmission, forwarded.version))

    async def answer_many(self, client: ClientSubscriptions, rfwds: list[Verified]
                          ) -> list[list[bytes]]:
        """The answers of a block's RFWDs, with `route`: those whose queue another worker
        owns go to it together, one part per owner, while this worker runs its own."""
        route = self.route
        assert route is not None
        opened = [self._open(client.conn, rfwd) for rfwd in rfwds]
        inner: list[list[bytes]] = [[] for _ in rfwds]
        elsewhere: dict[int, list[int]] = {}
        for i, o in enumerate(opened):
            if isinstance(o, tuple):
                owner = route.owner_elsewhere(o[0].transmission, o[0].version)
                if owner is not None:
                    elsewhere.setdefault(owner, []).append(i)

        async def run_at(owner: int, indexes: list[int]) -> None:
            answers = await route.run_elsewhere(client, owner, [
                (o[0].transmission, o[0].version) for o in (opened[i] for i in indexes)
                if isinstance(o, tuple)])
            for i, answer in zip(indexes, answers, strict=True):
                inner[i] = answer

        away = {i for indexes in elsewhere.values() for i in indexes}
        async with trio.open_nursery() as nursery:
            for owner, indexes in elsewhere.items():
                nursery.start_soon(run_at, owner, indexes)
            for i, o in enumerate(opened):
                if isinstance(o, tuple) and i not in away:
                    inner[i] = await self.run_here(client, o[0].transmission, o[0].version)
        return [o if isinstance(o, list) else self._seal(rfwd, o[0], o[1], answers)
                for rfwd, o, answers in zip(rfwds, opened, inner, strict=True)]

    async def run_here(self, client: ClientSubscriptions, transmission: bytes,
                       version: int) -> list[bytes]:
        """A forwarded transmission verified and run in this worker: its answers."""
        inner = await self._verify(client.conn, transmission, version)
        return [inner] if isinstance(inner, bytes) else await self._execute(client, inner)

    def _open(self, conn: Connection, rfwd: Verified
              ) -> tuple[proxying.Forwarded, bytes] | list[bytes]:
        """The forwarded transmission and the session secret, or the RFWD's refusal."""
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
        return forwarded, secret

    def _seal(self, rfwd: Verified, forwarded: proxying.Forwarded, secret: bytes,
              answers: list[bytes]) -> list[bytes]:
        if len(answers) != 1:  # a sender's command has one answer
            return _refuse(rfwd, INTERNAL)
        self._counters.proxy_messages_received += 1
        body = proxying.encrypt_forwarded_response(forwarded, answers[0], secret, rfwd.corr_id)
        return [encode_response_transmission(rfwd.corr_id, rfwd.entity_id, RRES(body),
                                             rfwd.version)]


def _refuse(rfwd: Verified, error: ErrorType) -> list[bytes]:
    return [error_transmission(rfwd.corr_id, rfwd.entity_id, error, rfwd.version)]
