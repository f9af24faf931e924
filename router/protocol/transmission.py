"""Transmissions (docs/protocol.md#transmissions): ``ss(authorization) | ss(corrId) | ss(entityId)
| command``.

The command stays encoded in `Transmission.command`, so the signature is
checked over the exact bytes received (docs/protocol.md#signatures) before anything else is decoded.
"""

from __future__ import annotations

from .encoding import ss, ss_len
from .types import BLOCK, ErrorType, ProtocolError, Transmission

# Authorization lengths the router accepts (docs/protocol.md#authorization): none, Ed25519, X25519
# authenticator, Ed448.
AUTH_LENGTHS = frozenset((0, 64, 80, 114))


def encode_transmission(t: Transmission) -> bytes:
    a, c, e = t.authorization, t.corr_id, t.entity_id
    return b"".join((ss_len(len(a)), a, ss_len(len(c)), c, ss_len(len(e)), e, t.command))


def decode_transmission(data: bytes) -> Transmission:
    """Split one transmission; `ProtocolError(BLOCK)` if the short strings do not fit."""
    size = len(data)
    fields = []
    pos = 0
    for _ in range(3):
        if pos >= size:
            raise ProtocolError(BLOCK, "truncated transmission")
        end = pos + 1 + data[pos]
        if end > size:
            raise ProtocolError(BLOCK, "truncated transmission")
        fields.append(data[pos + 1 : end])
        pos = end
    return Transmission(fields[0], fields[1], fields[2], data[pos:])


def command_offset(data: bytes) -> int:
    """Where a transmission's command starts, past its three short strings: a look at
    the command without splitting the rest. `ProtocolError(BLOCK)` if they do not fit."""
    pos = 0
    for _ in range(3):
        if pos >= len(data):
            raise ProtocolError(BLOCK, "truncated transmission")
        pos += 1 + data[pos]
    if pos > len(data):
        raise ProtocolError(BLOCK, "truncated transmission")
    return pos


def authorized_bytes(
    session_id: bytes, corr_id: bytes, entity_id: bytes, command: bytes
) -> bytes:
    """The bytes an authorization covers (docs/protocol.md#signatures): the session id is signed,
    never sent."""
    return b"".join((ss(session_id), ss(corr_id), ss(entity_id), command))


def transmission_authorized(session_id: bytes, t: Transmission) -> bytes:
    """`authorized_bytes` for a decoded transmission."""
    return authorized_bytes(session_id, t.corr_id, t.entity_id, t.command)


def check_auth_length(authorization: bytes) -> ErrorType | None:
    """None if the authorization has a known length (docs/protocol.md#authorization), else
    `BLOCK`."""
    return None if len(authorization) in AUTH_LENGTHS else BLOCK
