"""Block encryption from v11 (docs/protocol.md#block-encryption): every block after the
hellos is one authenticated box, keyed by a chain that advances once per block.

    (sndChain, rcvChain) = HKDF-SHA512(sessionId, X25519(sessionDH), "SimpleXSbChainInit", 64)
    (nextChain, key, nonce) = HKDF-SHA512("", chain, "SimpleXSbChain", 88)   ; 32 | 32 | 24
    block = box(key, nonce, word16 len | content | '#' * (16366 - len))     ; 16 + 16368 bytes

The router sends with the first chain key and receives with the second; the client
swaps them. The box is XSalsa20-Poly1305 with the key first put through HSalsa20 with a
zero input, as the reference's box does for a raw shared secret (NaCl's crypto_box
after `beforenm`); its wire form is the 16-byte tag, then the ciphertext.

Pure: bytes in, bytes out. A `BlockCipher` holds the two chain keys of one connection
and advances them; it does no I/O.
"""

from __future__ import annotations

import ctypes
import hashlib

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.exceptions import RuntimeError as NaclRuntimeError

from .block import BLOCK_SIZE
from .sodium import unbound
from .types import BLOCK, LARGE_MSG, ProtocolError

TAG_SIZE = 16
PADDED_SIZE = BLOCK_SIZE - TAG_SIZE  # 16368: what is boxed
MAX_CONTENT = PADDED_SIZE - 2  # 16366
CHAIN_KEY_SIZE = 32

_INIT_INFO = b"SimpleXSbChainInit"
_STEP_INFO = b"SimpleXSbChain"
_PAD = b"#" * PADDED_SIZE
_PLAIN_TAIL = b"#" * (BLOCK_SIZE - PADDED_SIZE)  # what a plain block has past the boxed part
_ZERO16 = bytes(16)


def hkdf_sha512(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 with SHA-512 (an empty salt is HMAC's all-zero key, as the RFC says)."""
    prk_pads = _hmac_pads(_hmac_sha512(_hmac_pads(salt), ikm))
    out = b""
    block = b""
    counter = 1
    while len(out) < length:
        block = _hmac_sha512(prk_pads, block + info + bytes((counter,)))
        out += block
        counter += 1
    return out[:length]


# HMAC-SHA512 (RFC 2104) from its two padded keys, made once per key: a chain step
# (below) is three HMACs under two keys, once per block, and the standard library's
# one-shot HMAC sets its key up again on every call (a third of the step's time).
_SHA512_BLOCK = 128
_IPAD = bytes(b ^ 0x36 for b in range(256))  # translation tables: each byte XOR the pad
_OPAD = bytes(b ^ 0x5C for b in range(256))


def _hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    if len(key) > _SHA512_BLOCK:
        key = hashlib.sha512(key).digest()
    key = key.ljust(_SHA512_BLOCK, b"\0")
    return key.translate(_IPAD), key.translate(_OPAD)


def _hmac_sha512(pads: tuple[bytes, bytes], message: bytes) -> bytes:
    inner, outer = pads
    return hashlib.sha512(outer + hashlib.sha512(inner + message).digest()).digest()


# --- HSalsa20 (what NaCl's beforenm applies to a shared secret) -------------------------

_MASK = 0xFFFFFFFF
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)


def _rotl(v: int, n: int) -> int:
    return ((v << n) | (v >> (32 - n))) & _MASK


def _hsalsa20_python(key: bytes, data16: bytes) -> bytes:
    """HSalsa20 of a 32-byte key and a 16-byte input, written out: the fallback when
    libsodium's own is not reachable (and the check of it in the tests)."""
    k = [int.from_bytes(key[i : i + 4], "little") for i in range(0, 32, 4)]
    n = [int.from_bytes(data16[i : i + 4], "little") for i in range(0, 16, 4)]
    x = [
        _SIGMA[0], k[0], k[1], k[2], k[3], _SIGMA[1], n[0], n[1],
        n[2], n[3], _SIGMA[2], k[4], k[5], k[6], k[7], _SIGMA[3],
    ]
    for _ in range(10):
        for a, b, c, d in ((0, 4, 8, 12), (5, 9, 13, 1), (10, 14, 2, 6), (15, 3, 7, 11),
                           (0, 1, 2, 3), (5, 6, 7, 4), (10, 11, 8, 9), (15, 12, 13, 14)):
            x[b] ^= _rotl((x[a] + x[d]) & _MASK, 7)
            x[c] ^= _rotl((x[b] + x[a]) & _MASK, 9)
            x[d] ^= _rotl((x[c] + x[b]) & _MASK, 13)
            x[a] ^= _rotl((x[d] + x[c]) & _MASK, 18)
    return b"".join(x[i].to_bytes(4, "little") for i in (0, 5, 10, 15, 6, 7, 8, 9))


# PyNaCl binds crypto_box_beforenm, which uses it, but not the function itself.
_HSALSA20 = unbound("crypto_core_hsalsa20", (ctypes.c_char_p,) * 4)


def hsalsa20(key: bytes, data16: bytes) -> bytes:
    """HSalsa20 of a 32-byte key and a 16-byte input."""
    if len(key) != 32 or len(data16) != 16:
        raise ValueError("HSalsa20 takes a 32-byte key and 16 bytes of input")
    if _HSALSA20 is None:
        return _hsalsa20_python(key, data16)
    out = ctypes.create_string_buffer(32)  # per call: clients may run in several threads
    _HSALSA20(out, data16, key, None)
    return out.raw


def box_key_of_secret(secret32: bytes) -> bytes:
    """The XSalsa20-Poly1305 key of a raw 32-byte secret, as the reference's box
    derives it (the same step NaCl's beforenm takes after the DH)."""
    return hsalsa20(secret32, _ZERO16)


# --- the chain ------------------------------------------------------------------------


def chain_init(session_id: bytes, dh_secret: bytes) -> tuple[bytes, bytes]:
    """The router's (send, receive) chain keys; a client uses them swapped."""
    out = hkdf_sha512(session_id, dh_secret, _INIT_INFO, 2 * CHAIN_KEY_SIZE)
    return out[:CHAIN_KEY_SIZE], out[CHAIN_KEY_SIZE:]


_ZERO_KEY_PADS = _hmac_pads(b"")
_STEP_FIRST = _STEP_INFO + b"\x01"
_STEP_SECOND = _STEP_INFO + b"\x02"


def chain_step(chain_key: bytes) -> tuple[bytes, bytes, bytes]:
    """(next chain key, box key, nonce) for one block: `hkdf_sha512(b"", chain_key,
    _STEP_INFO, 88)`, its two output blocks written out (it runs for every block)."""
    pads = _hmac_pads(_hmac_sha512(_ZERO_KEY_PADS, chain_key))
    first = _hmac_sha512(pads, _STEP_FIRST)
    second = _hmac_sha512(pads, first + _STEP_SECOND)
    return first[:32], first[32:], second[:24]


def seal_block(content: bytes, key: bytes, nonce: bytes) -> bytes:
    """One encrypted 16384-byte block of `content` (a hello is never sealed)."""
    n = len(content)
    if n > MAX_CONTENT:
        raise ProtocolError(LARGE_MSG, f"block content of {n} bytes")
    padded = b"".join((n.to_bytes(2, "big"), content, _PAD[n + 2 :]))
    return bindings.crypto_secretbox_easy(padded, nonce, box_key_of_secret(key))


def open_block(block: bytes, key: bytes, nonce: bytes) -> bytes:
    """The content of an encrypted block; `ProtocolError(BLOCK)` if it does not open."""
    if len(block) != BLOCK_SIZE:
        raise ProtocolError(BLOCK, f"block of {len(block)} bytes")
    try:
        padded = bindings.crypto_secretbox_open_easy(block, nonce, box_key_of_secret(key))
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise ProtocolError(BLOCK, "block does not decrypt") from None
    n = (padded[0] << 8) | padded[1]
    if n > MAX_CONTENT:
        raise ProtocolError(BLOCK, "content length exceeds block")
    return padded[2 : 2 + n]


class BlockCipher:
    """The two chains of one connection. `seal` and `open` each advance their own chain
    by one block, so both ends must see every block in order."""

    __slots__ = ("_send", "_receive")

    def __init__(self, send_chain: bytes, receive_chain: bytes) -> None:
        self._send = send_chain
        self._receive = receive_chain

    @classmethod
    def for_router(cls, session_id: bytes, dh_secret: bytes) -> BlockCipher:
        send, receive = chain_init(session_id, dh_secret)
        return cls(send, receive)

    @classmethod
    def for_client(cls, session_id: bytes, dh_secret: bytes) -> BlockCipher:
        send, receive = chain_init(session_id, dh_secret)
        return cls(receive, send)

    def seal(self, content: bytes) -> bytes:
        self._send, key, nonce = chain_step(self._send)
        return seal_block(content, key, nonce)

    def open(self, block: bytes) -> bytes:
        self._receive, key, nonce = chain_step(self._receive)
        return open_block(block, key, nonce)

    # A plain block (block.py: word16 len | content | '#' padding, 16384 bytes) and a
    # boxed one's inside (word16 len | content | '#' padding, 16368 bytes) share their
    # layout: the connection's plain blocks go in and come out of the box with one
    # copy each, not taken apart and padded again.

    def seal_plain_block(self, block: bytes) -> bytes:
        """`seal` of a plain block's content: the box of its first 16368 bytes, which
        are what `seal_block` pads that content to."""
        if len(block) != BLOCK_SIZE:
            raise ProtocolError(BLOCK, f"block of {len(block)} bytes")
        n = (block[0] << 8) | block[1]
        if n > MAX_CONTENT:
            raise ProtocolError(LARGE_MSG, f"block content of {n} bytes")
        self._send, key, nonce = chain_step(self._send)
        return bindings.crypto_secretbox_easy(block[:PADDED_SIZE], nonce, box_key_of_secret(key))

    def open_to_plain_block(self, block: bytes) -> bytes:
        """`open`, its content returned as a plain block (the padding the sender chose,
        never checked, then '#'); `ProtocolError(BLOCK)` as `open_block`."""
        self._receive, key, nonce = chain_step(self._receive)
        if len(block) != BLOCK_SIZE:
            raise ProtocolError(BLOCK, f"block of {len(block)} bytes")
        try:
            padded = bindings.crypto_secretbox_open_easy(block, nonce, box_key_of_secret(key))
        except (CryptoError, NaclRuntimeError, ValueError, TypeError):
            raise ProtocolError(BLOCK, "block does not decrypt") from None
        if ((padded[0] << 8) | padded[1]) > MAX_CONTENT:
            raise ProtocolError(BLOCK, "content length exceeds block")
        return padded + _PLAIN_TAIL


def dh_secret(private32: bytes, peer_public32: bytes) -> bytes:
    """The raw X25519 shared secret (not NaCl's `beforenm` of it): the chain's input.
    `ProtocolError(BLOCK)` for a low-order peer key, which libsodium refuses."""
    try:
        return bindings.crypto_scalarmult(private32, peer_public32)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise ProtocolError(BLOCK, "unusable DH key") from None


def sha512(data: bytes) -> bytes:
    return hashlib.sha512(data).digest()
