"""Error strings carried by `ERR` (docs/protocol.md#errors).

``errorType = BLOCK | SESSION | CMD SP cmdErr | PROXY SP proxyErr | AUTH | QUOTA
| NO_MSG | LARGE_MSG | INTERNAL | CRYPTO | SERVICE | EXPIRED | STORE SP text
| BLOCKED SP blockInfo``. A proxy error (docs/protocol.md#private-message-routing) is
checked against its grammar and then kept encoded (`ErrorType("PROXY", bytes)`), so a
proxy relays what it got without re-encoding it; `proxy_error_parts` reads it and
`proxy_protocol_error` / `proxy_broker_error` build one.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import versions
from .encoding import utf8
from .types import AUTH, CMD_SYNTAX, CmdErr, ErrorType, ProtocolError

_SIMPLE_ERRORS = {
    tag: ErrorType(tag)
    for tag in (
        "BLOCK", "SESSION", "AUTH", "QUOTA", "NO_MSG", "LARGE_MSG", "INTERNAL",
        "CRYPTO", "SERVICE", "EXPIRED", "DUPLICATE_",
    )
}
_CMD_ERRORS = {e.value.encode(): ErrorType("CMD", e) for e in CmdErr}
_CMD_ERRORS[b"NO_QUEUE"] = ErrorType("CMD", CmdErr.NO_ENTITY)  # old name, still parsed


_NOTICE = ",notice="


def for_version(e: ErrorType, version: int) -> ErrorType:
    """The error as `version` can carry it: BLOCKED is AUTH before v12 and loses its
    client notice before v18 (docs/protocol.md#errors)."""
    if e.tag != "BLOCKED":
        return e
    if not versions.has_blocked_error(version):
        return AUTH
    if not versions.has_client_notices(version) and isinstance(e.arg, str) and _NOTICE in e.arg:
        return ErrorType("BLOCKED", e.arg[: e.arg.index(_NOTICE)])
    return e


def encode_error(e: ErrorType, version: int | None = None) -> bytes:
    """The error's bytes; with a `version`, as that version carries it (`for_version`)."""
    if version is not None:
        e = for_version(e, version)
    arg = e.arg
    tag = e.tag.encode()
    if arg is None:
        return tag
    if isinstance(arg, CmdErr):
        return tag + b" " + arg.value.encode()
    if isinstance(arg, str):
        return tag + b" " + arg.encode()
    return tag + b" " + arg


def _token(data: bytes, pos: int) -> tuple[bytes, int]:
    """The bytes from `pos` up to the next SP (or end), and the position of that SP."""
    j = data.find(b" ", pos)
    if j < 0:
        return data[pos:], len(data)
    return data[pos:j], j


_BLOCK_REASONS = (b"reason=spam", b"reason=content")


def _blocked_info(b: bytes) -> str:
    for reason in _BLOCK_REASONS:
        if b == reason or b.startswith(reason + b",notice="):
            return utf8(b)
    raise ProtocolError(CMD_SYNTAX, "bad block info")


def decode_error(data: bytes) -> ErrorType:
    """An `ERR` payload (docs/protocol.md#errors); `ProtocolError(CMD SYNTAX)` if it is not one."""
    tag, j = _token(data, 0)
    simple = _SIMPLE_ERRORS.get(tag.decode("latin-1"))
    if simple is not None:
        if j != len(data):
            raise ProtocolError(CMD_SYNTAX, "trailing bytes after error")
        return simple
    if j >= len(data):
        raise ProtocolError(CMD_SYNTAX, "unknown error")
    rest = data[j + 1 :]
    if tag == b"CMD":
        err = _CMD_ERRORS.get(rest)
        if err is None:
            raise ProtocolError(CMD_SYNTAX, "bad command error")
        return err
    if tag == b"PROXY":
        _check_proxy_error(rest)
        return ErrorType("PROXY", rest)
    if tag == b"STORE":
        return ErrorType("STORE", utf8(rest))
    if tag == b"BLOCKED":
        return ErrorType("BLOCKED", _blocked_info(rest))
    raise ProtocolError(CMD_SYNTAX, "unknown error")


# Proxy errors are validated against their grammar and then kept encoded.
_PROXY_SIMPLE = frozenset((b"BASIC_AUTH", b"NO_SESSION"))
_BROKER_SIMPLE = frozenset((b"TIMEOUT", b"HOST", b"NO_SERVICE"))
_TRANSPORT_SIMPLE = frozenset((b"BLOCK", b"VERSION", b"LARGE_MSG", b"SESSION", b"NO_AUTH"))
_HANDSHAKE_ERRORS = frozenset((b"PARSE", b"IDENTITY", b"BAD_AUTH", b"BAD_SERVICE"))
_NET_SIMPLE = frozenset((b"UNKNOWNCA", b"FAILED", b"TIMEOUT"))
_NET_WITH_TEXT = frozenset((b"CONNECT", b"TLS", b"SUBSCRIBE"))


def _exact_ss(data: bytes, pos: int) -> None:
    """`data[pos:]` must be exactly one short string."""
    if pos >= len(data) or pos + 1 + data[pos] != len(data):
        raise ProtocolError(CMD_SYNTAX, "bad short string")


def _check_proxy_error(data: bytes) -> None:
    # PROTOCOL nests a whole errorType; walk the nesting in a loop, not by recursion,
    # so a block full of "PROXY PROTOCOL " cannot exhaust the stack.
    while True:
        tag, j = _token(data, 0)
        if tag in _PROXY_SIMPLE and j == len(data):
            return
        if j >= len(data):
            raise ProtocolError(CMD_SYNTAX, "bad proxy error")
        rest = data[j + 1 :]
        if tag == b"BROKER":
            _check_broker_error(rest)
            return
        if tag != b"PROTOCOL":
            raise ProtocolError(CMD_SYNTAX, "bad proxy error")
        inner, k = _token(rest, 0)
        if inner != b"PROXY" or k >= len(rest):
            decode_error(rest)
            return
        data = rest[k + 1 :]


def _check_broker_error(data: bytes) -> None:
    tag, j = _token(data, 0)
    end = j == len(data)
    if tag in _BROKER_SIMPLE and end:
        return
    if tag == b"NETWORK" and end:
        return
    if end:
        raise ProtocolError(CMD_SYNTAX, "bad broker error")
    rest = data[j + 1 :]
    if tag in (b"RESPONSE", b"UNEXPECTED"):
        _exact_ss(data, j + 1)
    elif tag == b"TRANSPORT":
        _check_transport_error(rest)
    elif tag == b"NETWORK":
        _check_network_error(rest)
    else:
        raise ProtocolError(CMD_SYNTAX, "bad broker error")


def _check_transport_error(data: bytes) -> None:
    if data in _TRANSPORT_SIMPLE:
        return
    tag, j = _token(data, 0)
    if tag == b"HANDSHAKE" and j < len(data) and data[j + 1 :] in _HANDSHAKE_ERRORS:
        return
    raise ProtocolError(CMD_SYNTAX, "bad transport error")


def _check_network_error(data: bytes) -> None:
    if data in _NET_SIMPLE:
        return
    tag, j = _token(data, 0)
    if tag in _NET_WITH_TEXT and j < len(data):
        _exact_ss(data, j + 1)
        return
    raise ProtocolError(CMD_SYNTAX, "bad network error")


# --- building and reading proxy errors (docs/protocol.md#private-message-routing) ----

# BrokerErrorType's arguments without text, as the proxy sends them.
BROKER_TIMEOUT = b"TIMEOUT"
BROKER_HOST = b"HOST"
BROKER_NO_SERVICE = b"NO_SERVICE"
BROKER_NETWORK = b"NETWORK"  # the reference sends NETWORK without its detail
# TransportError arguments of `BROKER TRANSPORT`.
TRANSPORT_VERSION = b"VERSION"
TRANSPORT_NO_AUTH = b"NO_AUTH"
TRANSPORT_BLOCK = b"BLOCK"
TRANSPORT_LARGE_MSG = b"LARGE_MSG"
TRANSPORT_SESSION = b"SESSION"


def proxy_protocol_error(e: ErrorType) -> ErrorType:
    """``PROXY PROTOCOL e``: the destination answered RFWD (or the proxy's own request)
    with the error `e`."""
    return ErrorType("PROXY", b"PROTOCOL " + encode_error(e))


def _short_text(text: str) -> bytes:
    b = text.encode()[:255]
    return bytes((len(b),)) + b


def proxy_broker_error(kind: bytes, text: str | None = None) -> ErrorType:
    """``PROXY BROKER kind``: the proxy's connection to the destination failed.

    `kind` is TIMEOUT, HOST, NO_SERVICE or NETWORK without text; RESPONSE or
    UNEXPECTED with `text` (a short string, cut at 255 bytes); or TRANSPORT with
    `text` one of the TransportError words (VERSION, NO_AUTH, BLOCK, ...).
    """
    if kind in (b"RESPONSE", b"UNEXPECTED"):
        arg = b"BROKER " + kind + b" " + _short_text(text or "")
    elif kind == b"TRANSPORT":
        arg = b"BROKER TRANSPORT " + (text or "").encode()
    else:
        if text is not None:
            raise ValueError(f"BROKER {kind!r} carries no text")
        arg = b"BROKER " + kind
    _check_proxy_error(arg)
    return ErrorType("PROXY", arg)


def proxy_transport_error(word: bytes) -> ErrorType:
    """``PROXY BROKER TRANSPORT word`` (VERSION, NO_AUTH, ...)."""
    return proxy_broker_error(b"TRANSPORT", word.decode())


@dataclass(frozen=True, slots=True)
class ProxyErrorParts:
    """A `PROXY` error read apart: `kind` is PROTOCOL, BROKER, BASIC_AUTH or NO_SESSION;
    `protocol_error` the nested error of PROTOCOL; `broker` what follows BROKER (e.g.
    b"TIMEOUT", b"TRANSPORT VERSION", b"RESPONSE" + ss(text))."""

    kind: str
    protocol_error: ErrorType | None = None
    broker: bytes | None = None


def proxy_error_parts(e: ErrorType) -> ProxyErrorParts | None:
    """The parts of a PROXY error; None for any other error."""
    if e.tag != "PROXY" or not isinstance(e.arg, bytes):
        return None
    data = e.arg
    tag, j = _token(data, 0)
    rest = data[j + 1 :]
    if tag == b"PROTOCOL":
        return ProxyErrorParts("PROTOCOL", protocol_error=decode_error(rest))
    if tag == b"BROKER":
        return ProxyErrorParts("BROKER", broker=rest)
    return ProxyErrorParts(tag.decode("latin-1"))
