"""Primitive SMP encodings (docs/protocol.md#notation): a parsing cursor and the matching encoders.

Every parse failure raises `ProtocolError` carrying the error the caller asked
for (`CMD SYNTAX` by default), so a layer that must answer `BLOCK` or fail a
handshake builds its `Parser` with that error instead of catching and
re-raising. Encoders raise `ValueError` for values the wire cannot carry (a
short string over 255 bytes, say): that is the sender's bug, not the peer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .keys import KeyType, key_type
from .types import CMD_SYNTAX, ErrorType, ProtocolError

T = TypeVar("T")

# One-byte length prefixes, looked up instead of built on every call.
_LEN = tuple(bytes((n,)) for n in range(256))


class Parser:
    """A cursor over `data`; each reader consumes what it returns."""

    __slots__ = ("data", "pos", "error")

    def __init__(self, data: bytes, pos: int = 0, error: ErrorType = CMD_SYNTAX) -> None:
        self.data = data
        self.pos = pos
        self.error = error

    def fail(self, detail: str = "") -> ProtocolError:
        return ProtocolError(self.error, detail)

    def take(self, n: int) -> bytes:
        start = self.pos
        end = start + n
        if n < 0 or end > len(self.data):
            raise self.fail("unexpected end of input")
        self.pos = end
        return self.data[start:end]

    def byte(self) -> int:
        pos = self.pos
        if pos >= len(self.data):
            raise self.fail("unexpected end of input")
        self.pos = pos + 1
        return self.data[pos]

    def char(self, expected: int) -> None:
        """Consume one byte that must equal `expected` (e.g. the SP after a tag)."""
        if self.byte() != expected:
            raise self.fail(f"expected {chr(expected)!r}")

    def space(self) -> None:
        self.char(0x20)

    def word16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def int64(self) -> int:
        return int.from_bytes(self.take(8), "big", signed=True)

    def short_string(self) -> bytes:
        return self.take(self.byte())

    def large(self) -> bytes:
        return self.take(self.word16())

    def bool_(self) -> bool:
        b = self.byte()
        if b == 0x54:  # 'T'
            return True
        if b == 0x46:  # 'F'
            return False
        raise self.fail("expected T or F")

    def maybe(self, fn: Callable[[], T]) -> T | None:
        b = self.byte()
        if b == 0x30:  # '0'
            return None
        if b == 0x31:  # '1'
            return fn()
        raise self.fail("expected 0 or 1")

    def key(self) -> bytes:
        """ss(SPKI DER) of a key type this router knows (docs/protocol.md#keys)."""
        spki = self.short_string()
        try:
            key_type(spki)
        except ProtocolError:
            raise self.fail("unknown key encoding") from None
        return spki

    def dh_key(self) -> bytes:
        """ss(SPKI DER) that must be an X25519 key (DH keys, docs/protocol.md#keys)."""
        spki = self.key()
        if key_type(spki) is not KeyType.X25519:
            raise self.fail("DH key must be X25519")
        return spki

    def rest(self) -> bytes:
        data = self.data
        pos = self.pos
        self.pos = len(data)
        return data[pos:] if pos else data

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail("trailing bytes")


def utf8(b: bytes) -> str:
    """Text from the wire; `ProtocolError(CMD SYNTAX)` if it is not UTF-8."""
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise ProtocolError(CMD_SYNTAX, "invalid UTF-8") from None


def ss(b: bytes) -> bytes:
    n = len(b)
    if n > 255:
        raise ValueError(f"short string of {n} bytes")
    return _LEN[n] + b


def ss_len(n: int) -> bytes:
    """The one-byte length prefix of a short string of `n` bytes."""
    if n > 255:
        raise ValueError(f"short string of {n} bytes")
    return _LEN[n]


def word16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def int64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def large(b: bytes) -> bytes:
    return word16(len(b)) + b


def bool_(x: bool) -> bytes:
    return b"T" if x else b"F"


def maybe(x: T | None, fn: Callable[[T], bytes]) -> bytes:
    return b"0" if x is None else b"1" + fn(x)


def encode_key(spki: bytes) -> bytes:
    return ss(spki)
