"""BatchPacker.pack: the one loop that fills blocks (the router's send loop, the
client's writer, encode_batches) hands back a full block when the next
transmission does not fit, and starts the next block with it."""

from __future__ import annotations

import pytest

from router.protocol.block import (
    BatchPacker,
    decode_batch,
    decode_batch_content,
    encode_batches,
    iter_batch_content,
)
from router.protocol.types import ProtocolError


def test_pack_returns_the_full_block_and_keeps_the_transmission_that_did_not_fit():
    packer = BatchPacker()
    sent = [bytes([i]) * 3000 for i in range(12)]
    blocks = [full for t in sent if (full := packer.pack(t)) is not None]
    assert blocks and len(packer) > 0
    blocks.append(packer.take_block())
    assert [t for block in blocks for t in decode_batch(block)] == sent
    assert blocks == encode_batches(sent)


def test_pack_counts_transmissions_as_add_does():
    packer = BatchPacker()
    assert all(packer.pack(b"t") is None for _ in range(255))
    full = packer.pack(b"last")
    assert full is not None and decode_batch(full) == [b"t"] * 255
    assert len(packer) == 1 and decode_batch(packer.take_block()) == [b"last"]


@pytest.mark.parametrize("content", [
    b"\x02\x00\x01a\x00\x02bc", b"\x01\x00\x00", b"", b"\x00", b"\x01\x00\x10abc",
    b"\x01\x00\x01\x00zz", b"\x03\x00\x01a\x00\x01b",
])
def test_reading_a_batch_one_transmission_at_a_time_is_decoding_it(content):
    try:
        expected: list[bytes] | ProtocolError = decode_batch_content(content)
    except ProtocolError as e:
        expected = e
    read: list[bytes] = []
    try:
        for raw in iter_batch_content(content):
            read.append(raw)
    except ProtocolError as e:
        assert isinstance(expected, ProtocolError) and str(e) == str(expected)
        assert len(read) <= (content[0] if content else 0)  # read up to the defect
    else:
        assert read == expected
