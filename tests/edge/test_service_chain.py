"""The client certificate chains the native TLS listener lets through
(docs/protocol.md#native-tls): none, one self-signed certificate, or 2 to 4 that
verify against their own last certificate, as the reference's
`validateClientCertificate`."""

from __future__ import annotations

import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.service_client import _certificate, chain_of_two, self_signed_cert
from router.server.edge.openssl_tls import service_chain_error


def test_no_certificate_a_self_signed_one_and_a_chain_of_two_pass():
    assert service_chain_error(()) is None
    assert service_chain_error(tuple(self_signed_cert().chain)) is None
    assert service_chain_error(tuple(chain_of_two().chain)) is None


def test_a_leaf_its_root_did_not_sign_is_refused():
    root_key, leaf_key, other = (Ed25519PrivateKey.generate() for _ in range(3))
    root = _certificate("root", root_key, "root", root_key, ca=True)
    leaf = _certificate("leaf", leaf_key, "root", other, ca=False)  # signed by another key
    assert service_chain_error((leaf, root)) is not None


def test_a_chain_of_four_passes_and_of_five_is_too_long():
    keys = [Ed25519PrivateKey.generate() for _ in range(5)]
    names = [f"c{i}" for i in range(5)]
    certs = [_certificate(names[4], keys[4], names[4], keys[4], ca=True)]
    for i in (3, 2, 1, 0):
        certs.insert(0, _certificate(names[i], keys[i], names[i + 1], keys[i + 1], ca=i > 0))
    assert service_chain_error(tuple(certs[1:])) is None  # leaf c1 .. root c4: four
    assert service_chain_error(tuple(certs)) == "chain too long"


def test_a_chain_outside_its_validity_is_refused():
    chain = tuple(self_signed_cert().chain)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=400)
    assert service_chain_error(chain, now=later) is not None
