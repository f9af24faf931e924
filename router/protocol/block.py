"""Transport blocks and batches (docs/protocol.md#blocks).

Every unit on the wire is a block of exactly `BLOCK_SIZE` bytes:
``word16 L | content | '#' padding``. After the handshake the content is a
batch: ``count (1..255) | count * (word16 tLen | transmission)``, consumed
exactly. Senders pack transmissions in order, as many per block as fit under
the reference sender's rule: the sum of ``2 + tLen`` over a batch stays within
`BATCH_LIMIT` (16384 - 19; 19 = length, count and 16 bytes the reference keeps
for a block MAC at later versions).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .types import BLOCK, LARGE_MSG, ProtocolError

BLOCK_SIZE = 16384
MAX_CONTENT = BLOCK_SIZE - 2
MAX_BATCH = 255
BATCH_LIMIT = BLOCK_SIZE - 19  # 16365
MAX_TRANSMISSION_SIZE = BATCH_LIMIT - 2  # 16363

_PAD = b"#" * MAX_CONTENT
_COUNT = tuple(bytes((n,)) for n in range(256))


def pad_block(content: bytes) -> bytes:
    """One full block around `content` (a hello or an encoded batch)."""
    n = len(content)
    if n > MAX_CONTENT:
        raise ProtocolError(LARGE_MSG, f"block content of {n} bytes")
    return b"".join((n.to_bytes(2, "big"), content, _PAD[n:]))


def unpad_block(block: bytes) -> bytes:
    """The content of a block; `ProtocolError(BLOCK)` if the size or length is wrong.

    The padding itself is not checked, as the reference does not check it.
    """
    if len(block) != BLOCK_SIZE:
        raise ProtocolError(BLOCK, f"block of {len(block)} bytes")
    n = (block[0] << 8) | block[1]
    if n > MAX_CONTENT:
        raise ProtocolError(BLOCK, "content length exceeds block")
    return block[2 : 2 + n]


def decode_batch(block: bytes) -> list[bytes]:
    """The transmissions of a batch block, in order; `ProtocolError(BLOCK)` on any defect."""
    return decode_batch_content(unpad_block(block))


def iter_batch_content(content: bytes) -> Iterator[bytes]:
    """`decode_batch_content` one transmission at a time: a reader that needs only the
    first few pays only for those; a defect raises when the reading reaches it."""
    size = len(content)
    if size == 0 or content[0] == 0:
        raise ProtocolError(BLOCK, "empty batch")
    pos = 1
    for _ in range(content[0]):
        start = pos + 2
        if start > size:
            raise ProtocolError(BLOCK, "truncated batch")
        end = start + ((content[pos] << 8) | content[pos + 1])
        if end > size:
            raise ProtocolError(BLOCK, "truncated transmission")
        yield content[start:end]
        pos = end
    if pos != size:
        raise ProtocolError(BLOCK, "bytes after the last transmission")


def decode_batch_content(content: bytes) -> list[bytes]:
    """The transmissions of a batch already taken out of its block (by `unpad_block`, or
    by opening an encrypted block: docs/protocol.md#block-encryption)."""
    size = len(content)
    if size == 0 or content[0] == 0:
        raise ProtocolError(BLOCK, "empty batch")
    count = content[0]
    out: list[bytes] = []
    pos = 1
    for _ in range(count):
        start = pos + 2
        if start > size:
            raise ProtocolError(BLOCK, "truncated batch")
        end = start + ((content[pos] << 8) | content[pos + 1])
        if end > size:
            raise ProtocolError(BLOCK, "truncated transmission")
        out.append(content[start:end])
        pos = end
    if pos != size:
        raise ProtocolError(BLOCK, "bytes after the last transmission")
    return out


class BatchPacker:
    """Collects transmissions for one block, in order, while they fit.

    The router's send loop calls `add` until it returns False (or it has no
    more to send), then `take_block` for the padded block, and starts again
    with the transmission that did not fit.
    """

    __slots__ = ("_parts", "_size", "_count")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0  # sum of 2 + tLen, compared with BATCH_LIMIT
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        """Bytes used so far by the batch's length-prefixed transmissions."""
        return self._size

    def fits(self, transmission: bytes) -> bool:
        return (
            self._count < MAX_BATCH
            and self._size + 2 + len(transmission) <= BATCH_LIMIT
        )

    def add(self, transmission: bytes) -> bool:
        """Append if it fits; False (and nothing added) when it does not.

        A transmission that could never fit any block raises
        `ProtocolError(LARGE_MSG)`, so a caller cannot loop on it forever.
        """
        n = len(transmission)
        if n > MAX_TRANSMISSION_SIZE:
            raise ProtocolError(LARGE_MSG, f"transmission of {n} bytes")
        if self._count >= MAX_BATCH or self._size + 2 + n > BATCH_LIMIT:
            return False
        self._parts.append(n.to_bytes(2, "big"))
        self._parts.append(transmission)
        self._size += 2 + n
        self._count += 1
        return True

    def take_content(self) -> bytes:
        """The batch of everything added so far, unpadded, for an encrypted block
        (docs/protocol.md#block-encryption); the packer is empty afterwards."""
        if not self._count:
            raise ValueError("no transmissions to pack")
        parts = self._parts
        parts.insert(0, _COUNT[self._count])
        content = b"".join(parts)
        self._parts = []
        self._size = 0
        self._count = 0
        return content

    def take_block(self) -> bytes:
        """The padded block of everything added so far; the packer is empty afterwards."""
        if not self._count:
            raise ValueError("no transmissions to pack")
        length = 1 + self._size
        parts = self._parts
        parts.insert(0, _COUNT[self._count])
        parts.insert(0, length.to_bytes(2, "big"))
        parts.append(_PAD[length:])
        block = b"".join(parts)
        self._parts = []
        self._size = 0
        self._count = 0
        return block

    def pack(self, transmission: bytes) -> bytes | None:
        """Add `transmission`; if it does not fit, the block of what came before it
        is returned (ready to send) and `transmission` starts the next one."""
        if self.add(transmission):
            return None
        full = self.take_block()
        self.add(transmission)
        return full


def encode_batches(transmissions: Iterable[bytes]) -> list[bytes]:
    """Pack `transmissions` in order into as few padded blocks as the rule allows."""
    packer = BatchPacker()
    blocks: list[bytes] = []
    for t in transmissions:
        if (full := packer.pack(t)) is not None:
            blocks.append(full)
    if len(packer):
        blocks.append(packer.take_block())
    return blocks
