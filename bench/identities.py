"""Deterministic queue identities shared by the router process and the load clients.

Benchmarks need tens of thousands of queues. Creating them with `NEW` would
measure key generation and X25519 on both sides, not what the benchmark is
about, so the router process loads them straight into its queue store and the
clients derive the same ids and keys from the queue's index. Every queue uses
the same recipient signing key, sender signing key and DH secret (the keys
are valid; only their values repeat), while the router side keeps a separate
copy of each key per record, so the store costs what it would with distinct
keys.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from nacl import bindings

from router.client import RecipientQueue
from router.protocol import crypto
from router.protocol.keys import ed25519_spki, x25519_spki
from router.server.core.commands import ID_SIZE
from store.interfaces import QueueRecord


def _seed(label: str) -> bytes:
    return hashlib.sha256(b"smp-router bench " + label.encode()).digest()


@lru_cache(maxsize=1)
def keys() -> dict[str, bytes]:
    """The shared key material, derived from fixed labels."""
    rcv_seed, snd_seed = _seed("recipient"), _seed("sender")
    rcv_dh_priv, srv_dh_priv = _seed("recipient dh"), _seed("router dh")
    srv_dh_key = x25519_spki(bindings.crypto_scalarmult_base(srv_dh_priv))
    rcv_dh_key = x25519_spki(bindings.crypto_scalarmult_base(rcv_dh_priv))
    return {
        "rcv_seed": rcv_seed,
        "rcv_key": ed25519_spki(bindings.crypto_sign_seed_keypair(rcv_seed)[0]),
        "snd_seed": snd_seed,
        "snd_key": ed25519_spki(bindings.crypto_sign_seed_keypair(snd_seed)[0]),
        "rcv_dh_priv": rcv_dh_priv,
        "srv_dh_key": srv_dh_key,
        "box_key": crypto.box_key(srv_dh_priv, rcv_dh_key),
    }


_SHARED_PREFIX = 8


def recipient_id(index: int) -> bytes:
    return hashlib.blake2b(b"r%d" % index, digest_size=ID_SIZE).digest()


def sender_id(index: int) -> bytes:
    # Begins as the recipient id does (the owner is read from the first 4 bytes): both
    # ids of a queue name one owner at any count of workers, as the router mints them
    # (router/server/core/ownership.py).
    rest = hashlib.blake2b(b"s%d" % index, digest_size=ID_SIZE).digest()
    return recipient_id(index)[:_SHARED_PREFIX] + rest[_SHARED_PREFIX:]


def recipient_queue(index: int) -> RecipientQueue:
    """What the recipient client holds for queue `index`."""
    k = keys()
    return RecipientQueue(
        recipient_id(index), sender_id(index), k["rcv_seed"], k["rcv_key"],
        k["rcv_dh_priv"], k["srv_dh_key"], k["box_key"], True,
    )


def _copy(value: bytes) -> bytes:
    return bytes(bytearray(value))  # a distinct object, as a record read from a store has


def queue_record(index: int, *, secured: bool) -> QueueRecord:
    """The router's record of queue `index`; `secured` sets the sender key (signed SEND)."""
    k = keys()
    return QueueRecord(
        recipient_id(index), sender_id(index), _copy(k["rcv_key"]), _copy(k["box_key"]),
        _copy(k["snd_key"]) if secured else None, True,
    )
