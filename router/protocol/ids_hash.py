"""The ids hash of service subscriptions (docs/protocol.md#service-subscriptions): the XOR
of the MD5 digests of queue ids, 16 bytes, all zeros for no queue.

XOR makes the hash of a set independent of order and lets a holder keep it
current in one step per change: adding an id and removing it are both a XOR
with its digest. As integers here, so that one step is one operation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

IDS_HASH_SIZE = 16


def id_digest(entity_id: bytes) -> int:
    """One id's share of an ids hash: its MD5 digest as an integer."""
    return int.from_bytes(hashlib.md5(entity_id).digest(), "big")


def ids_hash_bytes(value: int) -> bytes:
    return value.to_bytes(IDS_HASH_SIZE, "big")


def ids_hash_int(value: bytes) -> int:
    if len(value) != IDS_HASH_SIZE:
        raise ValueError(f"an ids hash has {IDS_HASH_SIZE} bytes, not {len(value)}")
    return int.from_bytes(value, "big")


def queue_ids_hash(entity_ids: Iterable[bytes]) -> bytes:
    """The ids hash of a set of ids (each given once)."""
    value = 0
    for entity_id in entity_ids:
        value ^= id_digest(entity_id)
    return ids_hash_bytes(value)
