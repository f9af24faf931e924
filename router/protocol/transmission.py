"""Transmissions (docs/protocol.md#transmissions): ``ss(authorization) | ss(corrId) | ss(entityId)
| command``, and from v16 a service signature field right after a non-empty authorization
(docs/protocol.md#service-signature): ``'0'`` for none or ``'1' ss(Ed25519 signature)``.

The command stays encoded in `Transmission.command`, so the signature is
checked over the exact bytes received (docs/protocol.md#signatures) before anything else is decoded.
"""

from __future__ import annotations

from . import versions
from .encoding import ss, ss_len
from .types import BLOCK, ErrorType, ProtocolError, Transmission

# Authorization lengths the router accepts (docs/protocol.md#authorization): none, Ed25519, X25519
# authenticator, Ed448.
AUTH_LENGTHS = frozenset((0, 64, 80, 114))


SERVICE_SIGNATURE_SIZE = 64  # Ed25519


def _service_field(t: Transmission, version: int) -> bytes:
    if not t.authorization or not versions.has_service_field(version):
        if t.service_sig is not None:
            raise ValueError("a service signature needs an authorization and v16")
        return b""
    if t.service_sig is None:
        return b"0"
    return b"1" + ss(t.service_sig)


def encode_transmission(t: Transmission, version: int = versions.LEGACY_VERSION) -> bytes:
    a, c, e = t.authorization, t.corr_id, t.entity_id
    return b"".join((
        ss_len(len(a)), a, _service_field(t, version), ss_len(len(c)), c, ss_len(len(e)), e,
        t.command,
    ))


def _truncated() -> ProtocolError:
    return ProtocolError(BLOCK, "truncated transmission")


def _after_service_field(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """The service signature at `pos` (v16, after a non-empty authorization) and where
    the transmission goes on; `ProtocolError(BLOCK)` if the field is malformed."""
    if pos >= len(data):
        raise _truncated()
    flag = data[pos]
    if flag == 0x30:  # '0'
        return None, pos + 1
    if flag != 0x31 or pos + 1 >= len(data):  # '1'
        raise ProtocolError(BLOCK, "bad service signature field")
    end = pos + 2 + data[pos + 1]
    if end > len(data) or data[pos + 1] != SERVICE_SIGNATURE_SIZE:
        raise ProtocolError(BLOCK, "bad service signature field")
    return data[pos + 2 : end], end


def decode_transmission(data: bytes, version: int = versions.LEGACY_VERSION) -> Transmission:
    """Split one transmission; `ProtocolError(BLOCK)` if the fields do not fit."""
    size = len(data)
    if not size:
        raise _truncated()
    pos = 1 + data[0]
    if pos > size:
        raise _truncated()
    authorization = data[1:pos]
    service_sig = None
    if authorization and versions.has_service_field(version):
        service_sig, pos = _after_service_field(data, pos)
    fields = []
    for _ in range(2):
        if pos >= size:
            raise _truncated()
        end = pos + 1 + data[pos]
        if end > size:
            raise _truncated()
        fields.append(data[pos + 1 : end])
        pos = end
    return Transmission(authorization, fields[0], fields[1], data[pos:], service_sig)


def entity_and_command_offset(data: bytes, version: int = versions.LEGACY_VERSION
                              ) -> tuple[bytes, int]:
    """A transmission's entity id and where its command starts, past its fields: a
    look at the command without splitting the rest. `ProtocolError(BLOCK)` if they
    do not fit."""
    if not data:
        raise _truncated()
    pos = 1 + data[0]
    if data[0] and versions.has_service_field(version):
        pos = _after_service_field(data, pos)[1]
    if pos >= len(data):
        raise _truncated()
    entity = pos = pos + 1 + data[pos]  # past the corrId
    if pos >= len(data):
        raise _truncated()
    pos += 1 + data[pos]
    if pos > len(data):
        raise _truncated()
    return data[entity + 1 : pos], pos


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
