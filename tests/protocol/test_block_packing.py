"""BatchPacker.pack: the one loop that fills blocks (the router's send loop, the
client's writer, encode_batches) hands back a full block when the next
transmission does not fit, and starts the next block with it."""

from __future__ import annotations

from router.protocol.block import BatchPacker, decode_batch, encode_batches


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
