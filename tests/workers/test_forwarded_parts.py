"""A block of RFWDs in a worker of several (router/server/core/forwarded.py): those whose
queue another worker owns go to it as one part per owner, the rest run here, and the
answers keep the block's order."""

from __future__ import annotations

import os

from nacl import bindings

from router.protocol import proxying
from router.protocol.codec import decode_response
from router.protocol.crypto import x25519_spki
from router.protocol.transmission import Transmission, decode_transmission, encode_transmission
from router.protocol.types import CRYPTO, ERR, RFWD, RRES
from router.server.core.counters import Counters
from router.server.core.forwarded import Forwarded
from router.server.core.verified import Verified

VERSION = 19
ELSEWHERE = b"E" * 24  # the queues of the other worker begin with E


class _ProxyConnection:  # what Forwarded reads of a proxy's connection
    def __init__(self) -> None:
        self.router_dh_private = os.urandom(32)
        self.proxy_private = os.urandom(32)
        self.client_key = x25519_spki(bindings.crypto_scalarmult_base(self.proxy_private))
        self.destination_key = bindings.crypto_scalarmult_base(self.router_dh_private)


class _Client:
    def __init__(self, conn: _ProxyConnection) -> None:
        self.conn = conn


class _Route:
    def __init__(self) -> None:
        self.parts: list[tuple[int, list[bytes]]] = []

    def owner_elsewhere(self, transmission: bytes, version: int) -> int | None:
        return 1 if decode_transmission(transmission, version).entity_id == ELSEWHERE else None

    async def run_elsewhere(self, client, owner, forwarded):
        self.parts.append((owner, [decode_transmission(t, v).corr_id for t, v in forwarded]))
        return [[_answer(t, v, b"there")] for t, v in forwarded]


def _answer(transmission: bytes, version: int, where: bytes) -> bytes:
    t = decode_transmission(transmission, version)
    return encode_transmission(Transmission(b"", t.corr_id, t.entity_id, b"ERR " + where),
                               version)


def _rfwd(conn: _ProxyConnection, entity_id: bytes, n: int):
    client_corr = bytes([n]) * 24
    inner = encode_transmission(Transmission(b"", client_corr, entity_id, b"SEND F x"), VERSION)
    request = proxying.encrypt_transmission(conn.destination_key, client_corr, inner)
    secret = proxying.shared_secret(conn.proxy_private, conn.destination_key)
    corr_id = os.urandom(24)
    body = proxying.wrap_forward(secret, corr_id, client_corr, VERSION, request.client_key,
                                 request.enc_transmission)
    return Verified(corr_id, b"", RFWD(body), None, VERSION), request, secret


async def test_a_blocks_rfwds_go_to_their_owners_together_and_answer_in_order() -> None:
    conn = _ProxyConnection()

    async def verify(c, transmission, version):
        return _answer(transmission, version, b"here")  # an error answer: not run

    async def execute(client, verified):
        raise AssertionError("only verified here")

    forwarded = Forwarded(Counters(), verify, execute)
    route = forwarded.route = _Route()
    entity_ids = [b"H" * 24, ELSEWHERE, b"H" * 24, ELSEWHERE]
    made = [_rfwd(conn, e, n) for n, e in enumerate(entity_ids)]
    broken = Verified(os.urandom(24), b"", RFWD(b"not a box"), None, VERSION)
    rfwds = [v for v, _, _ in made]
    answers = await forwarded.answer_many(_Client(conn), [*rfwds[:2], broken, *rfwds[2:]])
    # One part to worker 1, with both of its transmissions.
    assert route.parts == [(1, [bytes([1]) * 24, bytes([3]) * 24])]
    assert len(answers) == 5 and all(len(a) == 1 for a in answers)
    assert decode_response(decode_transmission(answers[2][0], VERSION).command,
                           VERSION) == ERR(CRYPTO)
    places = [answers[0], answers[1], answers[3], answers[4]]
    wheres = []
    for (rfwd, request, secret), [raw] in zip(made, places, strict=True):
        t = decode_transmission(raw, VERSION)
        assert t.corr_id == rfwd.corr_id
        rres = decode_response(t.command, VERSION)
        assert isinstance(rres, RRES)
        _, enc = proxying.unwrap_forward_response(secret, rfwd.corr_id, rres.enc_fwd_response)
        inner = decode_transmission(proxying.decrypt_response(request, enc), VERSION)
        wheres.append(inner.command)
    assert wheres == [b"ERR here", b"ERR there", b"ERR here", b"ERR there"]
